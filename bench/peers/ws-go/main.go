// ws-go: the Go peer of bench/run's ws scenarios, github.com/coder/websocket
// (formerly nhooyr.io/websocket) echoing every message on any path as its
// own echo example does: Reader then Writer with io.Copy, message by
// message, compression off. net/http underneath; run with GOMAXPROCS=1.
package main

import (
	"context"
	"flag"
	"io"
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
		typ, rd, err := c.Reader(ctx)
		if err != nil {
			return
		}
		wr, err := c.Writer(ctx, typ)
		if err != nil {
			return
		}
		if _, err = io.Copy(wr, rd); err != nil {
			return
		}
		if err = wr.Close(); err != nil {
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
