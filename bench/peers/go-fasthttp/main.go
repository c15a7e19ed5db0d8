// Command go-fasthttp is the fasthttp peer: valyala/fasthttp answering
// "Hello, World!" as text/plain on every path. Run with GOMAXPROCS=1.
package main

import (
	"flag"
	"log"
	"net"

	"github.com/valyala/fasthttp"
)

var body = []byte("Hello, World!")

func main() {
	addr := flag.String("bind", "127.0.0.1:8080", "address to listen on")
	flag.Parse()
	ln, err := net.Listen("tcp4", *addr)
	if err != nil {
		log.Fatal(err)
	}
	server := &fasthttp.Server{
		Name: "fasthttp",
		Handler: func(ctx *fasthttp.RequestCtx) {
			ctx.SetContentType("text/plain")
			ctx.SetBody(body)
		},
		// Zero timeouts: idle keep-alive connections stay open, as in the
		// other peers. Concurrency is left at its default (256 Ki conns).
	}
	log.Fatal(server.Serve(ln))
}
