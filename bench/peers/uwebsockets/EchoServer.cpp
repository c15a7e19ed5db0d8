/* uWebSockets' examples/EchoServer.cpp as bench/run measures it: the same
 * App and echo handler, with what the benchmark fixes changed and nothing
 * else. Compression off (the CPU rows compare framing, not deflate; built
 * with -DUWS_NO_ZLIB besides), no TLS (built with LIBUS_NO_SSL), the port
 * from argv[1] instead of 9001, and idleTimeout 0 with no automatic pings
 * so that the idle10k connections stay open and quiet for the measurement
 * (the example closes sockets idle for 16 s). One thread, one loop. */
#include "App.h"

#include <cstdlib>
#include <iostream>

int main(int argc, char **argv) {
    int port = argc > 1 ? std::atoi(argv[1]) : 9001;

    struct PerSocketData {};

    uWS::App().ws<PerSocketData>("/*", {
        .compression = uWS::DISABLED,
        .maxPayloadLength = 100 * 1024 * 1024,
        .idleTimeout = 0,
        .maxBackpressure = 100 * 1024 * 1024,
        .closeOnBackpressureLimit = false,
        .resetIdleTimeoutOnSend = false,
        .sendPingsAutomatically = false,
        .message = [](auto *ws, std::string_view message, uWS::OpCode opCode) {
            ws->send(message, opCode, false);
        },
    }).listen(port, [port](auto *listen_socket) {
        if (listen_socket) {
            std::cout << "Listening on port " << port << std::endl;
        } else {
            std::cerr << "cannot listen on port " << port << std::endl;
            std::exit(1);
        }
    }).run();
}
