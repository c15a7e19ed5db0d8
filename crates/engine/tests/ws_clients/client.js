// An independent WebSocket client (Node.js with the `ws` package) checks an
// echo server: text, binary and empty messages, a message of 1 MiB less
// 1 KiB, a text message sent in fragments that split a UTF-8 character, a
// ping between the fragments of a message, ping and pong, and a close with
// 1000 answered by 1000.
//
// Usage: node client.js ws://HOST:PORT/echo
//
// Run by crates/engine/tests/websocket_clients.rs on the `ws_echo` example,
// with NODE_PATH naming the node_modules that
// `test_support::install::ws_node_modules` fills from package.json and
// package-lock.json beside this file. Prints `ok: CHECK` for each check
// passed; on the first failure prints `FAIL: CHECK: why` and exits 1.

"use strict";

const WebSocket = require("ws");

// Each wait for an answer; past it the check fails saying what it waited for.
const TIMEOUT_MS = 10_000;

const TEXT = "hello, peregrine \u2713 \u{1F985}";
const BINARY = Buffer.alloc(1024, 0).map((_, i) => i & 0xff);
const BIG = Buffer.alloc((1 << 20) - 1024, 0).map((_, i) => (i * 31 + (i >> 10)) & 0xff);
// "fragmented é ✓ end" in three frames, each cut inside a character: the
// server must check UTF-8 across fragments, not frame by frame (RFC 6455
// §5.6: "the whole message contains valid UTF-8").
const FRAGMENTS = [Buffer.from("fragmented \xc3", "latin1"), Buffer.from("\xa9 \xe2\x9c", "latin1"), Buffer.from("\x93 end", "latin1")];
const PING = Buffer.from("peregrine ping");

const url = process.argv[2];
if (!url || process.argv.length !== 3) {
  console.error("usage: node client.js ws://HOST:PORT/echo");
  process.exit(2);
}

let check = "connect";
function fail(why) {
  console.log(`FAIL: ${check}: ${why}`);
  process.exit(1);
}

// Everything the server sends, in order, for the checks to take one by one.
const inbox = [];
let wake = null;
function push(event) {
  inbox.push(event);
  if (wake) wake();
}
function next(what) {
  if (inbox.length) return Promise.resolve(inbox.shift());
  return new Promise((resolve) => {
    const timer = setTimeout(() => fail(`nothing within ${TIMEOUT_MS} ms while waiting for ${what}`), TIMEOUT_MS);
    wake = () => {
      clearTimeout(timer);
      wake = null;
      resolve(inbox.shift());
    };
  });
}

// The library's default offer (permessage-deflate) is kept: the server may
// accept or decline it.
const ws = new WebSocket(url, { handshakeTimeout: TIMEOUT_MS });
ws.on("message", (data, isBinary) => push({ kind: isBinary ? "binary" : "text", data }));
ws.on("pong", (data) => push({ kind: "pong", data }));
ws.on("close", (code, reason) => push({ kind: "close", code, reason: reason.toString() }));
ws.on("error", (e) => fail(`${e.message}`));
ws.on("unexpected-response", (_, res) => fail(`the handshake was answered ${res.statusCode} ${res.statusMessage}`));

function describe(event) {
  if (event.kind === "close") return `a close (${event.code}, ${JSON.stringify(event.reason)})`;
  const head = event.data.subarray(0, 40).toString(event.kind === "text" ? "utf8" : "hex");
  return `${event.kind} of ${event.data.length} bytes (${JSON.stringify(head)}...)`;
}

async function expect(kind, bytes) {
  const got = await next(`the echo of ${kind} of ${bytes.length} bytes`);
  if (got.kind !== kind || !Buffer.from(got.data).equals(bytes)) {
    fail(`sent ${kind} of ${bytes.length} bytes, got ${describe(got)}`);
  }
  console.log(`ok: ${check}`);
}

async function expectPong() {
  const got = await next("a pong");
  if (got.kind !== "pong" || !got.data.equals(PING)) fail(`sent a ping, got ${describe(got)}`);
}

ws.on("open", async () => {
  console.log(`ok: connect (extensions: ${JSON.stringify(ws.extensions)})`);

  check = "text";
  ws.send(TEXT);
  await expect("text", Buffer.from(TEXT));

  check = "binary";
  ws.send(BINARY);
  await expect("binary", BINARY);

  check = "empty text";
  ws.send("");
  await expect("text", Buffer.alloc(0));

  check = "empty binary";
  ws.send(Buffer.alloc(0));
  await expect("binary", Buffer.alloc(0));

  check = "1 MiB less 1 KiB binary";
  ws.send(BIG);
  await expect("binary", BIG);

  check = "fragmented text";
  // A text frame, then continuation frames: `fin: false` sends a fragment.
  ws.send(FRAGMENTS[0], { binary: false, fin: false });
  ws.send(FRAGMENTS[1], { binary: false, fin: false });
  ws.send(FRAGMENTS[2], { binary: false, fin: true });
  await expect("text", Buffer.concat(FRAGMENTS));

  check = "ping";
  ws.ping(PING);
  await expectPong();
  console.log(`ok: ${check}`);

  check = "ping between fragments";
  // RFC 6455 §5.4: "Control frames MAY be injected in the middle of a
  // fragmented message"; the pong comes first, the whole message after.
  ws.send(Buffer.from("before ping, "), { binary: true, fin: false });
  ws.ping(PING);
  ws.send(Buffer.from("after ping"), { binary: true, fin: true });
  await expectPong();
  await expect("binary", Buffer.from("before ping, after ping"));

  check = "close 1000";
  ws.close(1000, "bye");
  // The event comes once the TCP connection is closed too.
  const got = await next("the server's close");
  if (got.kind !== "close" || got.code !== 1000) fail(`sent a close with 1000, got ${describe(got)}`);
  console.log(`ok: ${check} (the server's reason: ${JSON.stringify(got.reason)})`);
  console.log("all checks passed");
  process.exit(0);
});
