module peregrine/bench/ws-go

go 1.23

require github.com/coder/websocket v1.8.15
