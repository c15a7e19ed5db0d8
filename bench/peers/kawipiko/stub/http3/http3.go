// Stand-in for quic-go's http3 (see ../quic).
package http3

import (
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/volution/kawipiko/stub/quic"
)

type Server struct {
	Handler    http.Handler
	TLSConfig  *tls.Config
	QuicConfig *quic.Config
}

func (s *Server) Serve(conn net.PacketConn) error { return errors.New("http3 is not built in") }
func (s *Server) Close() error                     { return nil }
func (s *Server) CloseGracefully(d time.Duration) error { return nil }
