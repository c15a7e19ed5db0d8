// Command go-nethttp is the Go standard library peer: net/http answering
// "Hello, World!" as text/plain on every path, or with -dir DIR serving DIR
// with http.FileServer (the file scenarios). Run with GOMAXPROCS=1.
package main

import (
	"flag"
	"log"
	"net"
	"net/http"
)

var body = []byte("Hello, World!")

func main() {
	addr := flag.String("bind", "127.0.0.1:8080", "address to listen on")
	dir := flag.String("dir", "", "serve this directory with http.FileServer instead of the hello")
	flag.Parse()
	// net.Listen uses the kernel's somaxconn as the accept backlog.
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	var handler http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h["Content-Type"] = []string{"text/plain"}
		h["Content-Length"] = []string{"13"}
		w.Write(body)
	})
	if *dir != "" {
		// Opens and stats the file per request; sendfile for the body;
		// Last-Modified and ranges, but no ETag.
		handler = http.FileServer(http.Dir(*dir))
	}
	// No timeouts: idle keep-alive connections stay open, as in the other peers.
	log.Fatal(http.Serve(ln, handler))
}
