// ws-go: the Go peer of bench/run's ws scenarios, github.com/coder/websocket
// (formerly nhooyr.io/websocket) echoing every message on any path, compression
// off, net/http underneath; run with GOMAXPROCS=1. Each message is read whole
// (Conn.Read) and written whole (Conn.Write): one frame back per frame in.
// Its own echo example streams instead (Reader, Writer, io.Copy), which
// sends each message as a non-final frame and an empty final one; the
// benchmark's client and check expect one frame per echo, as the other
// peers send.
package main

import (
	"context"
	"flag"
	"log"
	"net/http"

	"github.com/coder/websocket"
)

func echo(w http.ResponseWriter, r *http.Request) {
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{CompressionMode: websocket.CompressionDisabled})
	if err != nil {
		return
	}
	defer c.CloseNow()
	c.SetReadLimit(1 << 20)
	ctx := context.Background()
	for {
		typ, msg, err := c.Read(ctx)
		if err != nil {
			return
		}
		if err = c.Write(ctx, typ, msg); err != nil {
			return
		}
	}
}

func main() {
	bind := flag.String("bind", "127.0.0.1:8080", "address to listen on")
	flag.Parse()
	log.Printf("listening on %s", *bind)
	log.Fatal(http.ListenAndServe(*bind, http.HandlerFunc(echo)))
}
