"""A reference echo server, to check the driver against an implementation
known to pass Autobahn|Testsuite: the `websockets` library (not the
standard library: install it in a venv first).

    python3 -m venv /tmp/ab-venv && /tmp/ab-venv/bin/pip install websockets
    /tmp/ab-venv/bin/python reference_echo.py 9001 &
    python3 run.py --url ws://127.0.0.1:9001/echo

Echoes every message on any path, text as text and binary as binary;
messages up to 16 MiB + 1 KiB (the 9.x cases send 16 MiB); no compression
(the fuzzing client offers none), and as many fragments as 9.x sends.
"""

import asyncio
import os
import sys

# websockets 15+ fails a message of more than 4096 frames with 1009 ("too
# many fragments"), a limit of its own that RFC 6455 does not have; 9.3.1
# and 9.4.1 send 65,537. Raise it before the library reads it.
os.environ.setdefault("WEBSOCKETS_MAX_FRAGMENTS", str(2**20))

from websockets.asyncio.server import serve  # noqa: E402


async def echo(ws):
    async for message in ws:
        await ws.send(message)


async def main(port):
    async with serve(echo, "127.0.0.1", port, max_size=16 * 2**20 + 1024, compression=None) as server:
        print("listening on http://127.0.0.1:%d/" % port, flush=True)
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 9001))
