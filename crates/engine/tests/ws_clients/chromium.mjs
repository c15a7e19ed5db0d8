// Loads the `ws_echo` example's page in headless Chromium and prints the
// page's verdict on its WebSocket echoes.
//
// Usage: node chromium.mjs CHROMIUM http://HOST:PORT/
//
// Run by crates/engine/tests/websocket_clients.rs. The page opens a WebSocket
// to /echo, sends its messages, checks the echoes and the close, and resolves
// the promise `window.verdict` to "PASS" or "FAIL: why". This script drives
// Chromium through the DevTools protocol over --remote-debugging-pipe (JSON
// messages ended by a NUL byte on descriptors 3 and 4; nothing from npm):
// it loads the page, waits for its load event, then evaluates
// `window.verdict` with awaitPromise, so the answer is read when the page
// has it, however long the echoes take. Exits 0 on PASS; otherwise prints
// the verdict, the page's log, what the DevTools protocol saw of the
// WebSocket, and exits 1.

import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const [chromiumPath, pageUrl] = process.argv.slice(2);
if (!chromiumPath || !pageUrl) {
  console.error("usage: node chromium.mjs CHROMIUM http://HOST:PORT/");
  process.exit(2);
}
// Only bounds a browser that hangs; the page gives up after 20 s itself.
const DEADLINE_MS = 60_000;

const profileDir = mkdtempSync(join(tmpdir(), "peregrine-ws-chromium-"));
const chromium = spawn(
  chromiumPath,
  [
    "--headless",
    "--no-sandbox", // the test runs as root, where the sandbox refuses to start
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-quic",
    // The tests' certificates come from a CA of their own.
    "--ignore-certificate-errors",
    "--no-first-run",
    "--no-default-browser-check",
    // Without these Chromium keeps calling Google's hosts, which a closed
    // network refuses many times a second.
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--remote-debugging-pipe",
    `--user-data-dir=${profileDir}`,
    "about:blank",
  ],
  { stdio: ["ignore", "ignore", "pipe", "pipe", "pipe"] },
);
let chromiumStderr = "";
chromium.stderr.on("data", (d) => {
  chromiumStderr = (chromiumStderr + d).slice(-4000);
});
// However this script ends, Chromium and its profile do not outlive it.
process.on("exit", () => {
  chromium.kill("SIGKILL");
  removeProfile();
});
function removeProfile() {
  try {
    rmSync(profileDir, { recursive: true, force: true, maxRetries: 3 });
  } catch (e) {
    console.error(`warning: cannot remove ${profileDir}: ${e.message}`);
  }
}
// A failure unless the checks end by saying otherwise, however the script ends.
process.exitCode = 1;
let closing = false;
const exited = new Promise((resolve) => {
  chromium.on("exit", (code, signal) => {
    if (!closing) die(`Chromium exited (code ${code}, signal ${signal}); its stderr ends:\n${chromiumStderr}`);
    resolve();
  });
  chromium.on("error", (e) => {
    die(`cannot start ${chromiumPath}: ${e.message}`);
    resolve();
  });
});
// Closes Chromium (killing it if it does not close in 5 s), so that its
// profile is no longer written when removed, then exits with `code`.
async function quit(code) {
  closing = true;
  send("Browser.close").catch(() => {});
  const killer = setTimeout(() => chromium.kill("SIGKILL"), 5_000);
  await exited;
  clearTimeout(killer);
  removeProfile();
  process.exit(code);
}
function die(why) {
  if (closing) return;
  console.log(`FAIL: ${why}`);
  if (seen.length) console.log(`--- the DevTools protocol saw\n${seen.join("\n")}`);
  quit(1);
}
setTimeout(() => die(`no verdict within ${DEADLINE_MS} ms`), DEADLINE_MS).unref();

// ---------------------------------------------------------------- DevTools

const toChromium = chromium.stdio[3];
const fromChromium = chromium.stdio[4];
for (const pipe of [toChromium, fromChromium]) {
  pipe.on("error", (e) => die(`the DevTools pipe to Chromium broke: ${e.message}`));
}
let nextId = 1;
const pending = new Map(); // command id → { resolve, reject, method }
const waiters = []; // { method, resolve }, for the next event of that method
// What the page's WebSocket did, as Chromium reports it: said on failure.
const seen = [];

let inBuffer = "";
fromChromium.setEncoding("utf8");
fromChromium.on("data", (chunk) => {
  inBuffer += chunk;
  let end;
  while ((end = inBuffer.indexOf("\0")) >= 0) {
    const message = JSON.parse(inBuffer.slice(0, end));
    inBuffer = inBuffer.slice(end + 1);
    dispatch(message);
  }
});

function dispatch({ id, error, result, method, params }) {
  if (id !== undefined) {
    const p = pending.get(id);
    pending.delete(id);
    if (error) p?.reject(new Error(`${p.method}: ${error.message}`));
    else p?.resolve(result);
    return;
  }
  note(method, params);
  const i = waiters.findIndex((w) => w.method === method);
  if (i >= 0) waiters.splice(i, 1)[0].resolve(params);
}

function send(method, params = {}, sessionId = undefined) {
  const id = nextId++;
  return new Promise((resolve, reject) => {
    pending.set(id, { resolve, reject, method });
    toChromium.write(JSON.stringify({ id, method, params, sessionId }) + "\0");
  });
}

// Registered before the command that causes the event, so it cannot be missed.
function nextEvent(method) {
  return new Promise((resolve) => waiters.push({ method, resolve }));
}

function note(method, params) {
  const frame = (f) => `opcode ${f.opcode}, ${f.payloadData.length} characters${f.opcode === 2 ? " of base64" : ""}`;
  switch (method) {
    case "Network.webSocketCreated":
      return seen.push(`created ${params.url}`);
    case "Network.webSocketHandshakeResponseReceived":
      return seen.push(`handshake answered ${params.response.status} ${params.response.statusText}`);
    case "Network.webSocketFrameSent":
      return seen.push(`frame sent: ${frame(params.response)}`);
    case "Network.webSocketFrameReceived":
      return seen.push(`frame received: ${frame(params.response)}`);
    case "Network.webSocketFrameError":
      return seen.push(`frame error: ${params.errorMessage}`);
    case "Network.webSocketClosed":
      return seen.push("closed");
    case "Runtime.exceptionThrown":
      return seen.push(`page exception: ${params.exceptionDetails.exception?.description ?? params.exceptionDetails.text}`);
    case "Log.entryAdded":
      return seen.push(`console ${params.entry.level}: ${params.entry.text}`);
  }
}

// ---------------------------------------------------------------- the page

// The page's verdict, once it has one: "PASS" or "FAIL: why".
async function verdict() {
  const { targetId } = await send("Target.createTarget", { url: "about:blank" });
  const { sessionId } = await send("Target.attachToTarget", { targetId, flatten: true });
  for (const domain of ["Page", "Network", "Runtime", "Log"]) await send(`${domain}.enable`, {}, sessionId);
  const loaded = nextEvent("Page.loadEventFired");
  const nav = await send("Page.navigate", { url: pageUrl }, sessionId);
  if (nav.errorText) throw new Error(`loading ${pageUrl}: ${nav.errorText}`);
  await loaded;
  const evaluate = (expression) =>
    send("Runtime.evaluate", { expression, awaitPromise: true, returnByValue: true }, sessionId);
  const { result, exceptionDetails } = await evaluate("window.verdict");
  const log = await evaluate("document.getElementById('log')?.textContent");
  console.log(`the page's log:\n${log.result.value ?? "(no #log)"}`);
  if (exceptionDetails) {
    throw new Error(`evaluating window.verdict: ${exceptionDetails.exception?.description ?? exceptionDetails.text}`);
  }
  return result.value;
}

verdict().then(
  (said) => {
    if (said !== "PASS") return die(`the page's verdict: ${JSON.stringify(said)}`);
    console.log("the page's verdict: PASS");
    // How the WebSocket was opened: a 101 over HTTP/1.1; over HTTP/2
    // (RFC 8441) Chromium reports the stream's 200.
    for (const line of seen.filter((l) => l.startsWith("handshake answered"))) console.log(`websocket ${line}`);
    return quit(0);
  },
  (e) => die(e.message),
);
