#!/usr/bin/env python3
"""A free TCP port on 127.0.0.1, chosen by the kernel (bind to port 0).

The bench scripts used to pick a random number, which could land on a
port another engineer's run, or a client socket's ephemeral port, held:
the server then failed with "Address already in use". Run as a script it
prints the port (`port=$(python3 bench/lib/free_port.py)`); the Python
harness imports `free_port`.
"""
import socket


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    print(free_port())
