// Stand-in for quic-go v0.29 (which does not build with Go >= 1.20): the
// benchmark uses kawipiko over HTTP/1.1 only; --bind-quic is unsupported.
package quic

import "time"

type VersionNumber uint32

const (
	Version1       VersionNumber = 1
	VersionDraft29 VersionNumber = 0xff00001d
)

type Config struct {
	Versions                       []VersionNumber
	HandshakeIdleTimeout           time.Duration
	MaxIdleTimeout                 time.Duration
	MaxIncomingStreams             int64
	MaxIncomingUniStreams          int64
	InitialConnectionReceiveWindow uint64
	MaxConnectionReceiveWindow     uint64
	InitialStreamReceiveWindow     uint64
	MaxStreamReceiveWindow         uint64
	KeepAlivePeriod                time.Duration
}
