// Loads the example site in headless Chromium and checks what the browser saw.
//
// Usage: node check.mjs CHROMIUM URL
//
// Run by tests/browser.rs, which starts `peregrine serve site` first. Chromium
// is driven through the DevTools protocol over --remote-debugging-pipe (JSON
// messages ended by a NUL byte on descriptors 3 and 4), so nothing needs to
// be installed from npm. Exits 0 when every check passes; otherwise prints
// each failed check, then the network log of both loads, and exits 1.

import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const [chromiumPath, pageUrl, served = "dir"] = process.argv.slice(2);
if (!chromiumPath || !pageUrl || !["dir", "archive"].includes(served)) {
  console.error("usage: node check.mjs CHROMIUM URL [dir|archive]");
  process.exit(2);
}

// Over HTTPS the browser must negotiate HTTP/2 by ALPN; over cleartext it
// speaks HTTP/1.1 (browsers do not use h2c).
const PROTOCOL = pageUrl.startsWith("https:") ? "h2" : "http/1.1";
// The HTTPS test's certificate is self-signed: Chromium then keeps no
// cached copy of the document itself, so its reload is a plain GET.
const UNTRUSTED = pageUrl.startsWith("https:");
// Every wait below is for an event; this only bounds a browser that hangs.
const DEADLINE_MS = 45_000;
const ORIGIN = new URL(pageUrl).origin;
// The page's own resources: path → what the check needs of it.
// `serve site` negotiates among the .br/.zst/.gz siblings, which are the
// bytes `pack` makes (Chromium prefers the first of br, zstd, gzip that
// exists: br); the SVG has none, and is sent in identity until compressed
// on the fly. An archive made by `pack` has brotli variants of every
// compressible file, the SVG included.
const RESOURCES = served === "dir"
  ? {
    "/": { type: "Document", encoding: "br" },
    "/assets/style.css": { type: "Stylesheet", encoding: "br" },
    "/assets/app.js": { type: "Script", encoding: "br" },
    "/assets/falcon.svg": { type: "Image", encoding: null }, // no sibling
  }
  : {
    "/": { type: "Document", encoding: "br" },
    "/assets/style.css": { type: "Stylesheet", encoding: "br" },
    "/assets/app.js": { type: "Script", encoding: "br" },
    "/assets/falcon.svg": { type: "Image", encoding: "br" },
  };

const failures = [];
const check = (ok, message) => {
  if (!ok) failures.push(message);
  return ok;
};

// ---------------------------------------------------------------- Chromium

const profileDir = mkdtempSync(join(tmpdir(), "peregrine-browser-"));
const chromium = spawn(
  chromiumPath,
  [
    "--headless",
    "--no-sandbox", // the test runs as root, where the sandbox refuses to start
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-quic",
    // The test's certificate is self-signed; only the protocol is checked.
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
const chromiumExit = new Promise((resolve) =>
  chromium.on("exit", (code, signal) => {
    rejectAll(new Error(`Chromium exited (code ${code}, signal ${signal}); its stderr ends:\n${chromiumStderr}`));
    resolve();
  }),
);
const chromiumStartFailed = new Promise((resolve) =>
  chromium.on("error", (e) => {
    rejectAll(new Error(`cannot start ${chromiumPath}: ${e.message}`));
    resolve();
  }),
);
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

// Closes Chromium (killing it if it does not close) and removes its profile.
async function shutdown() {
  const closed = send("Browser.close").catch(() => {});
  const timeout = new Promise((resolve) => setTimeout(resolve, 5_000).unref());
  await Promise.race([Promise.all([closed, chromiumExit]), timeout]);
  chromium.kill("SIGKILL");
  await Promise.race([chromiumExit, chromiumStartFailed]);
  removeProfile();
}

const toChromium = chromium.stdio[3];
const fromChromium = chromium.stdio[4];
for (const pipe of [toChromium, fromChromium]) {
  pipe.on("error", (e) => rejectAll(new Error(`the DevTools pipe to Chromium broke: ${e.message}`)));
}
let nextId = 1;
const pending = new Map(); // command id → { resolve, reject, method }
const waiters = new Set(); // { method, sessionId, predicate, resolve, reject }
const listeners = []; // (message) => void, for every event

let gone = null; // why Chromium can no longer answer, once it cannot

function rejectAll(error) {
  gone ??= error;
  for (const p of pending.values()) p.reject(error);
  pending.clear();
  for (const w of waiters) w.reject(error);
  waiters.clear();
}

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

function dispatch(message) {
  if (message.id !== undefined) {
    const p = pending.get(message.id);
    if (!p) return;
    pending.delete(message.id);
    if (message.error) p.reject(new Error(`${p.method}: ${message.error.message}`));
    else p.resolve(message.result);
    return;
  }
  for (const listen of listeners) listen(message);
  for (const w of waiters) {
    if (w.method === message.method && w.sessionId === message.sessionId && w.predicate(message.params)) {
      waiters.delete(w);
      w.resolve(message.params);
    }
  }
}

function send(method, params = {}, sessionId = undefined) {
  const id = nextId++;
  return new Promise((resolve, reject) => {
    if (gone) return reject(gone);
    pending.set(id, { resolve, reject, method });
    toChromium.write(JSON.stringify({ id, method, params, sessionId }) + "\0");
  });
}

// Registered before the command that causes the event, so it cannot be missed.
function nextEvent(method, sessionId, predicate = () => true) {
  const event = new Promise((resolve, reject) =>
    gone ? reject(gone) : waiters.add({ method, sessionId, predicate, resolve, reject }),
  );
  event.catch(() => {}); // a waiter that lost a race is rejected when Chromium exits; that is not an error
  return event;
}

// ---------------------------------------------------------------- the page

// One record per request the page makes, filled in from the Network events.
let requests = new Map();
let pageErrors = [];

function record(id) {
  if (!requests.has(id)) requests.set(id, { id });
  return requests.get(id);
}

function listen(sessionId) {
  listeners.push(({ method, params, sessionId: from }) => {
    if (from !== sessionId) return;
    switch (method) {
      case "Network.requestWillBeSent":
        Object.assign(record(params.requestId), {
          url: params.request.url,
          type: params.type,
          // The browser fetches <link rel="icon"> for its own use, whenever it
          // likes, and never reports the fetch finished; it is not the page's.
          favicon: params.type === "Other" && params.initiator?.type === "other",
          done: false,
        });
        break;
      case "Network.requestWillBeSentExtraInfo": // the headers as sent on the wire
        record(params.requestId).sentHeaders = lowerKeys(params.headers);
        break;
      case "Network.requestServedFromCache":
        record(params.requestId).fromMemoryCache = true;
        break;
      case "Network.responseReceived": {
        const r = record(params.requestId);
        r.status = params.response.status;
        r.headers = lowerKeys(params.response.headers);
        r.fromDiskCache = params.response.fromDiskCache;
        r.protocol = params.response.protocol;
        break;
      }
      case "Network.responseReceivedExtraInfo": // the status and headers as received
        Object.assign(record(params.requestId), {
          wireStatus: params.statusCode,
          wireHeaders: lowerKeys(params.headers),
        });
        break;
      case "Network.loadingFinished":
        record(params.requestId).done = true;
        break;
      case "Network.loadingFailed":
        Object.assign(record(params.requestId), {
          done: true,
          failed: params.errorText + (params.blockedReason ? ` (blocked: ${params.blockedReason})` : ""),
        });
        break;
      case "Runtime.exceptionThrown": {
        const details = params.exceptionDetails;
        pageErrors.push(`exception: ${details.exception?.description ?? details.text}`);
        break;
      }
      case "Log.entryAdded":
        if (params.entry.level === "error") pageErrors.push(`${params.entry.source}: ${params.entry.text}`);
        break;
    }
  });
}

function lowerKeys(headers = {}) {
  return Object.fromEntries(Object.entries(headers).map(([k, v]) => [k.toLowerCase(), v]));
}

function pageRequests() {
  return [...requests.values()].filter((r) => r.url && !r.favicon);
}

// Where a response came from: the server (with the status it sent) or a cache.
function source(r) {
  if (r.fromMemoryCache) return "memory cache";
  if (r.fromDiskCache) return "disk cache";
  return "server";
}

// Resolves once the load event has fired and no request of the page is in
// flight. The listener updates the records before any waiter resolves, so
// checking the records (not counting events) cannot miss one.
async function settle(loaded, sessionId) {
  await loaded;
  while (pageRequests().some((r) => !r.done)) {
    await Promise.race([
      nextEvent("Network.loadingFinished", sessionId),
      nextEvent("Network.loadingFailed", sessionId),
    ]);
  }
}

async function inspectPage(sessionId) {
  const { result, exceptionDetails } = await send(
    "Runtime.evaluate",
    {
      returnByValue: true,
      expression: `(() => {
        const status = document.getElementById("status");
        const img = document.querySelector("header img");
        return {
          title: document.title,
          statusText: status ? status.textContent : null,
          statusClass: status ? status.className : null,
          background: getComputedStyle(document.body).backgroundColor,
          imgComplete: img ? img.complete : null,
          imgWidth: img ? img.naturalWidth : null,
        };
      })()`,
    },
    sessionId,
  );
  if (exceptionDetails) throw new Error(`evaluating the page's state: ${exceptionDetails.text}`);
  return result.value;
}

function checkPage(phase, page) {
  check(page.title === "Peregrine", `${phase}: title is ${JSON.stringify(page.title)}, not "Peregrine"`);
  check(
    typeof page.statusText === "string" && page.statusText.startsWith("JavaScript ran") && page.statusClass === "ran",
    `${phase}: #status is ${JSON.stringify(page.statusText)} (class ${JSON.stringify(page.statusClass)}): ` +
      "app.js did not run",
  );
  check(
    page.background === "rgb(247, 245, 240)",
    `${phase}: body background is ${page.background}, not rgb(247, 245, 240): style.css was not applied`,
  );
  check(
    page.imgComplete === true && page.imgWidth > 0,
    `${phase}: falcon.svg did not render (complete ${page.imgComplete}, naturalWidth ${page.imgWidth})`,
  );
  check(pageErrors.length === 0, `${phase}: the page reported errors:\n    ${pageErrors.join("\n    ")}`);
}

// The resources of the page by path; fails the check for any other request.
function byPath(phase) {
  const found = {};
  for (const r of pageRequests()) {
    const url = new URL(r.url);
    if (url.origin !== ORIGIN || !(url.pathname in RESOURCES)) {
      check(false, `${phase}: unexpected request for ${r.url}`);
      continue;
    }
    check(!(url.pathname in found), `${phase}: ${url.pathname} was requested twice`);
    found[url.pathname] = r;
  }
  for (const path of Object.keys(RESOURCES)) check(path in found, `${phase}: ${path} was never requested`);
  return found;
}

function checkFirstLoad(found) {
  for (const [path, r] of Object.entries(found)) {
    const want = RESOURCES[path];
    if (!check(!r.failed, `first load: ${path} failed: ${r.failed}`)) continue;
    check(source(r) === "server", `first load: ${path} came from the ${source(r)} of a fresh profile`);
    check(r.status === 200, `first load: ${path} has status ${r.status}, not 200`);
    check(r.protocol === PROTOCOL, `first load: ${path} came over ${r.protocol}, not ${PROTOCOL}`);
    check(r.type === want.type, `first load: ${path} loaded as a ${r.type}, not a ${want.type}`);
    check(/^"[^"]+"$/.test(r.headers?.etag ?? ""), `first load: ${path} has no strong ETag (${r.headers?.etag})`);
    const offered = r.sentHeaders?.["accept-encoding"] ?? "";
    const got = r.headers?.["content-encoding"] ?? null;
    if (want.encoding === null) {
      check(got === null, `first load: ${path} has Content-Encoding ${got} but no compressed sibling`);
    } else if (
      check(offered.includes(want.encoding), `first load: Chromium did not offer ${want.encoding} (${offered})`)
    ) {
      check(
        got === want.encoding,
        `first load: ${path} has Content-Encoding ${got}, not ${want.encoding} (Accept-Encoding: ${offered})`,
      );
      check(
        /accept-encoding/i.test(r.headers?.vary ?? ""),
        `first load: ${path} is negotiated but has no Vary: Accept-Encoding`,
      );
    }
  }
}

// A reload revalidates: the document must go to the server with If-None-Match
// and come back 304; every asset must come from a cache or be a 304 too,
// so nothing is downloaded again.
function checkReload(found, firstEtags, firstCodings) {
  for (const [path, r] of Object.entries(found)) {
    if (!check(!r.failed, `reload: ${path} failed: ${r.failed}`)) continue;
    if (path === "/" && !UNTRUSTED) {
      check(source(r) === "server", `reload: the document came from the ${source(r)}, not from the server`);
      const sent = r.sentHeaders?.["if-none-match"];
      check(
        sent === firstEtags[path],
        `reload: the document was requested with If-None-Match ${sent}, not ${firstEtags[path]}`,
      );
    }
    if (source(r) === "server") {
      // responseReceived reports the cached 200 that the 304 refreshed; the
      // status and headers the server sent are in responseReceivedExtraInfo.
      if (!check(r.wireStatus !== undefined, `reload: the server's answer for ${path} was not seen`)) continue;
      const etag = r.wireHeaders.etag;
      if ((path !== "/" || UNTRUSTED) && r.sentHeaders?.["if-none-match"] === undefined) {
        // The browser may send an asset without its validator, which the
        // server cannot control: seen when Chromium's favicon fetch of
        // falcon.svg held the cache entry while the <img> asked for it.
        // Then the right answer is the full 200 with the same ETag.
        check(r.wireStatus === 200, `reload: ${path} (sent without If-None-Match) was answered ${r.wireStatus}, not 200`);
        // Without a validator the server may pick another representation
        // (`serve DIR` compresses text files on the fly after the first
        // request, so an SVG first sent as itself may come back br): then
        // it must carry a strong ETag of its own (RFC 9110 §8.8.3: one
        // per representation); the same representation, the same ETag.
        const coding = r.wireHeaders["content-encoding"] ?? null;
        if (UNTRUSTED) {
          check(/^"[^"]+"$/.test(etag ?? ""), `reload: ${path}'s 200 has no strong ETag (${etag})`);
        } else if (coding !== firstCodings[path]) {
          check(/^"[^"]+"$/.test(etag ?? ""), `reload: ${path}'s 200 has no strong ETag (${etag})`);
          check(
            etag !== firstEtags[path],
            `reload: ${path}'s ${coding} 200 carries the ETag ${etag} of its ${firstCodings[path] ?? "identity"} first answer`,
          );
        } else {
          check(etag === firstEtags[path], `reload: ${path}'s 200 carries ETag ${etag}, not ${firstEtags[path]}`);
        }
        continue;
      }
      check(r.wireStatus === 304, `reload: ${path} was answered ${r.wireStatus}, not 304 Not Modified`);
      check(etag === firstEtags[path], `reload: ${path}'s 304 carries ETag ${etag}, not ${firstEtags[path]}`);
      // RFC 9110 §15.4.5: a 304 carries the Vary a 200 would have carried.
      if (RESOURCES[path].encoding !== null) {
        check(/accept-encoding/i.test(r.wireHeaders.vary ?? ""), `reload: ${path}'s 304 lacks Vary: Accept-Encoding`);
      }
    }
  }
}

// One line per request: what the browser sent and what the server answered.
function table(phase) {
  const rows = [...requests.values()].filter((r) => r.url).map((r) => {
    const got = r.wireHeaders ?? r.headers ?? {};
    const sent = r.sentHeaders ?? {};
    const answer = r.failed ? `FAILED ${r.failed}` : `${r.wireStatus ?? r.status} from ${source(r)}`;
    return (
      `  ${phase}: ${r.url}${r.favicon ? " (favicon)" : ""} ${answer}` +
      ` [sent If-None-Match: ${sent["if-none-match"] ?? "-"}, Accept-Encoding: ${sent["accept-encoding"] ?? "-"};` +
      ` got Content-Encoding: ${got["content-encoding"] ?? "-"}, ETag: ${got.etag ?? "-"},` +
      ` Vary: ${got.vary ?? "-"}, Cache-Control: ${got["cache-control"] ?? "-"}]`
    );
  });
  return rows.join("\n");
}

let step = "starting Chromium"; // named if the deadline passes

async function main() {
  const { targetId } = await send("Target.createTarget", { url: "about:blank" });
  const { sessionId } = await send("Target.attachToTarget", { targetId, flatten: true });
  listen(sessionId);
  const domains = ["Network", "Page", "Runtime", "Log"];
  await Promise.all(domains.map((domain) => send(`${domain}.enable`, {}, sessionId)));

  step = `loading ${pageUrl}`;
  let loaded = nextEvent("Page.loadEventFired", sessionId);
  const { errorText } = await send("Page.navigate", { url: pageUrl }, sessionId);
  if (errorText) throw new Error(`navigating to ${pageUrl}: ${errorText}`);
  await settle(loaded, sessionId);
  checkPage("first load", await inspectPage(sessionId));
  const first = byPath("first load");
  checkFirstLoad(first);
  const firstEtags = Object.fromEntries(Object.entries(first).map(([p, r]) => [p, r.headers?.etag]));
  const firstCodings = Object.fromEntries(
    Object.entries(first).map(([p, r]) => [p, r.headers?.["content-encoding"] ?? null]),
  );
  const log = [table("first load")];

  requests = new Map();
  pageErrors = [];
  step = `reloading ${pageUrl}`;
  loaded = nextEvent("Page.loadEventFired", sessionId);
  await send("Page.reload", { ignoreCache: false }, sessionId);
  await settle(loaded, sessionId);
  checkPage("reload", await inspectPage(sessionId));
  checkReload(byPath("reload"), firstEtags, firstCodings);
  log.push(table("reload"));
  return log.join("\n");
}

const deadline = setTimeout(() => {
  const stuck = pageRequests().filter((r) => !r.done).map((r) => r.url);
  console.log(
    `FAILED: ${step} did not finish within ${DEADLINE_MS / 1000} s` +
      (stuck.length ? `; requests still in flight: ${stuck.join(", ")}` : "") +
      `\nChromium's stderr ends:\n${chromiumStderr}`,
  );
  shutdown().finally(() => process.exit(1));
}, DEADLINE_MS);

let ok = false;
try {
  const log = await main();
  ok = failures.length === 0;
  console.log(ok ? `ok\n${log}` : `FAILED:\n- ${failures.join("\n- ")}\n\nnetwork log:\n${log}`);
} catch (e) {
  console.log(`FAILED: ${e.message}${failures.length ? `\n- ${failures.join("\n- ")}` : ""}`);
}
await shutdown();
clearTimeout(deadline);
process.exit(ok ? 0 : 1);
