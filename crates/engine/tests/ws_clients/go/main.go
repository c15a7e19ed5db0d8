// An independent WebSocket client (Go with github.com/coder/websocket) checks
// an echo server: text, binary and empty messages, a message of 1 MiB less
// 1 KiB, a text message sent in fragments that split a UTF-8 character,
// ping and pong, and a close with 1000 answered by 1000.
//
// Usage: ws-client-go ws://HOST:PORT/echo
//
// Built once by `test_support::install::ws_client_go` and run by
// crates/engine/tests/websocket_clients.rs on the `ws_echo` example. Prints
// `ok: CHECK` for each check passed; on the first failure prints
// `FAIL: CHECK: why` and exits 1.
package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"time"

	"github.com/coder/websocket"
)

// Each wait for an answer; past it the check fails saying what it waited for.
const timeout = 10 * time.Second

var check = "connect"

func fail(format string, args ...any) {
	fmt.Printf("FAIL: %s: %s\n", check, fmt.Sprintf(format, args...))
	os.Exit(1)
}

func ok(detail string) {
	fmt.Printf("ok: %s%s\n", check, detail)
}

// The contexts' cancel functions, kept only so that none is dropped: the
// program ends soon after its last wait.
var cancels []context.CancelFunc

// A context for one wait.
func within() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	cancels = append(cancels, cancel)
	return ctx
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: ws-client-go ws://HOST:PORT/echo")
		os.Exit(2)
	}
	text := []byte("hello, peregrine \u2713 \U0001F985")
	binary := make([]byte, 1024)
	for i := range binary {
		binary[i] = byte(i)
	}
	big := make([]byte, 1<<20-1024)
	for i := range big {
		big[i] = byte(i*31 + i>>10)
	}
	// "fragmented é ✓ end" in three frames, each cut inside a character: the
	// server must check UTF-8 across fragments, not frame by frame (RFC 6455
	// §5.6: "the whole message contains valid UTF-8").
	fragments := [][]byte{[]byte("fragmented \xc3"), []byte("\xa9 \xe2\x9c"), []byte("\x93 end")}

	// The library's default: no permessage-deflate offer.
	c, resp, err := websocket.Dial(within(), os.Args[1], nil)
	if err != nil {
		fail("%v", err)
	}
	defer c.CloseNow()
	ok(fmt.Sprintf(" (Sec-WebSocket-Extensions: %q)", resp.Header.Get("Sec-WebSocket-Extensions")))
	// The library refuses messages over 32 KiB unless told.
	c.SetReadLimit(1 << 20)

	echo := func(typ websocket.MessageType, msg []byte) {
		if err := c.Write(within(), typ, msg); err != nil {
			fail("%v", err)
		}
		expect(c, typ, msg)
	}

	check = "text"
	echo(websocket.MessageText, text)
	check = "binary"
	echo(websocket.MessageBinary, binary)
	check = "empty text"
	echo(websocket.MessageText, []byte{})
	check = "empty binary"
	echo(websocket.MessageBinary, []byte{})
	check = "1 MiB less 1 KiB binary"
	echo(websocket.MessageBinary, big)

	check = "fragmented text"
	// Each Write of a Writer is one frame (a text frame, then continuation
	// frames); Close sends an empty final one.
	w, err := c.Writer(within(), websocket.MessageText)
	if err != nil {
		fail("%v", err)
	}
	for _, f := range fragments {
		if _, err := w.Write(f); err != nil {
			fail("%v", err)
		}
	}
	if err := w.Close(); err != nil {
		fail("%v", err)
	}
	expect(c, websocket.MessageText, bytes.Join(fragments, nil))

	check = "ping"
	// Ping waits for its pong, which only a reader sees: one reads, meanwhile,
	// the echo of a message sent once the pong came.
	type message struct {
		typ  websocket.MessageType
		data []byte
		err  error
	}
	read := make(chan message, 1)
	// Longer than the Ping's own wait, so that a missing pong is reported
	// as such rather than as the reader's timeout closing the connection.
	readCtx, cancel := context.WithTimeout(context.Background(), 2*timeout)
	defer cancel()
	go func() {
		typ, data, err := c.Read(readCtx)
		read <- message{typ, data, err}
	}()
	if err := c.Ping(within()); err != nil {
		fail("%v", err)
	}
	if err := c.Write(within(), websocket.MessageText, []byte("after the pong")); err != nil {
		fail("%v", err)
	}
	got := <-read
	if got.err != nil || got.typ != websocket.MessageText || string(got.data) != "after the pong" {
		fail("after the pong, sent text \"after the pong\", got %v %q (%v)", got.typ, got.data, got.err)
	}
	ok("")

	check = "close 1000"
	// Close sends 1000 and waits for the server's close: it fails unless that
	// says 1000 too.
	if err := c.Close(websocket.StatusNormalClosure, "bye"); err != nil {
		fail("%v", err)
	}
	ok("")
	fmt.Println("all checks passed")
}

func expect(c *websocket.Conn, typ websocket.MessageType, sent []byte) {
	gotTyp, got, err := c.Read(within())
	if err != nil {
		fail("sent %v of %d bytes, got no echo: %v", typ, len(sent), err)
	}
	if gotTyp != typ || !bytes.Equal(got, sent) {
		fail("sent %v of %d bytes, the echo was %v of %d bytes (%q...)", typ, len(sent), gotTyp, len(got), head(got))
	}
	ok("")
}

func head(b []byte) []byte {
	if len(b) > 40 {
		return b[:40]
	}
	return b
}
