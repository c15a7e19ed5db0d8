"""The servers under test: how each is built, started, checked and stopped.

In its hello mode every server answers GET / with the 13-byte body
"Hello, World!" as text/plain; in its file mode (the file scenarios) it
serves the run's generated file tree (filetree.py), and limit answers its
hello to every request. Every server runs one worker (one thread, one
process, or GOMAXPROCS=1), listens on its own free port on 127.0.0.1 and is
pinned to CPU 0 with `taskset -c 0`; wrk runs on CPU 1. A server that fails
to build or to start is reported with the reason and skipped; it never
stops the run. A server without a mode takes no part in that mode's
scenarios (lighttpd has no hello; go-fasthttp and node serve no files).

peregrine-archive is Peregrine's site-archive server: it has no hello mode;
once per run it packs the generated file tree with `peregrine pack` and then
serves that archive (`peregrine serve FILE.prg`) in the file scenarios. The
load100k scenario (load.py) starts peregrine-archive, peregrine (`serve
DIR`) and nginx on a tree of 100,000 small files.

The TLS scenarios (tls-c50, tls-f17) run the servers with a TLS mode
(peregrine, peregrine-archive in tls-f17, nginx, h2o) with the run's throwaway
certificate (tls.Cert): `tls_argv` and `tls_files_argv`. limit, the
reference for plain HTTP, has no TLS and sits them out, as do lighttpd, the
Go peers and node (no TLS set up for them here).

kawipiko (a static server answering from a CDB file, the seeds' peer) takes
part in the file scenarios and real10k when a `kawipiko-server` is on PATH or
named by KAWIPIKO=/path (its `kawipiko-archiver` beside it, or on PATH, or
KAWIPIKO_ARCHIVER=/path); otherwise it is skipped with that reason. Its Go
module is not served by the module proxy here, so the runner cannot build it.
"""
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

from dataclasses import replace

import h2 as h2_
from free_port import free_port  # noqa: F401 (servers.free_port, used by proxy.py)
import install
import load
import procs
import tls as tls_

BENCH = install.BENCH
REPO = os.path.dirname(BENCH)
BUILD = os.path.join(BENCH, "build")
PEERS = os.path.join(BENCH, "peers")
SERVER_CPU = "0"
BODY = b"Hello, World!"
READY_TIMEOUT_S = 20.0

# Table order: the reference first, then the engine, then the peers.
ORDER = ["limit", "peregrine", "peregrine-archive", "peregrine-cache", "nginx", "kawipiko", "h2o", "lighttpd", "go-fasthttp",
         "go-nethttp", "node", "caddy"]


def log(msg):
    print(f"bench: {msg}", flush=True)


class Server:
    """One server kind. `prepare` installs and builds it (returns None or the
    reason it cannot run); `argv` says how to start it on a port in its
    hello mode, `files_argv` in its file mode, serving `root`."""

    name = ""
    env = None
    hello = True          # has a hello mode (the hello scenarios)
    serves_files = False  # has a file mode (the file scenarios)
    files_hello = False   # answers the file scenarios with its hello (limit)
    loads = False         # takes part in load100k (load_argv)
    tls = False           # has a TLS mode (the TLS scenarios: tls_argv, tls_files_argv)
    h2 = False            # serves files over HTTP/2, TLS and h2c (the h2 scenarios: h2_files_argv)
    h3 = False            # serves files over HTTP/3 on its TLS port (the h3 scenarios: tls_files_argv)

    def prepare(self):
        return None

    def prepare_files(self, tree, log_path=None, name="files"):
        """Called once per run and tree (the file scenarios', real10k's),
        after it is written, before the first scenario on it: work done once
        per tree (packing an archive, named after `name`). Returns None or
        the reason the server cannot serve it."""
        return None

    def setup_notes(self):
        """Lines for meta.txt about what prepare_files did."""
        return []

    def argv(self, port, tmp):
        raise NotImplementedError

    def files_argv(self, port, tmp, root):
        raise NotImplementedError

    def tls_argv(self, port, tmp, cert):
        """The hello mode over TLS with cert (a tls.Cert)."""
        raise NotImplementedError

    def tls_files_argv(self, port, tmp, root, cert):
        """The file mode over TLS with cert (a tls.Cert)."""
        raise NotImplementedError

    def h2_files_argv(self, port, tmp, root, cert):
        """The file mode over HTTP/2: over TLS with ALPN h2 when cert is
        given, else h2c with prior knowledge. By default the TLS or plain
        file mode, for servers that speak h2 there unasked (Peregrine, h2o)."""
        return self.tls_files_argv(port, tmp, root, cert) if cert else self.files_argv(port, tmp, root)

    def takes_part(self, point):
        """Whether this server runs at a load point."""
        if point.only and self.name not in point.only:
            return False
        if point.h2 and not self.h2:
            return False
        if point.h3 and not self.h3:
            return False
        if point.tls and not self.tls:
            return False
        if point.kind == "load":
            return self.loads
        if not point.file_mode:
            return self.hello
        if self.files_hello:
            return point.limit_ref
        return self.serves_files

    def version(self):
        return ""


def _fill(template, out_path, **values):
    """Writes a peer's configuration template with its @NAME@s filled."""
    with open(template) as f:
        conf = f.read()
    for k, v in values.items():
        conf = conf.replace(f"@{k}@", str(v))
    with open(out_path, "w") as f:
        f.write(conf)
    return out_path


class Limit(Server):
    name = "limit"
    files_hello = True

    def prepare(self):
        if not install.ensure_gcc():
            return "no gcc"
        os.makedirs(BUILD, exist_ok=True)
        src = os.path.join(BENCH, "limit", "limit.c")
        self.binary = os.path.join(BUILD, "limit")
        r = subprocess.run(["gcc", "-O2", "-Wall", "-o", self.binary, src],
                           capture_output=True, text=True)
        if r.returncode != 0:
            return "gcc failed: " + r.stderr.strip()[-500:]
        # The reference must be right before anything is measured against it.
        r = subprocess.run([sys.executable, os.path.join(BENCH, "limit", "check.py"), self.binary],
                           capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            return "limit/check.py failed: " + (r.stdout + r.stderr).strip()[-500:]
        log(r.stdout.strip())
        return None

    def argv(self, port, tmp):
        return [self.binary, str(port)]

    def version(self):
        r = subprocess.run(["gcc", "--version"], capture_output=True, text=True)
        return "bench/limit/limit.c built with " + r.stdout.splitlines()[0] + " -O2"


class Peregrine(Server):
    name = "peregrine"
    serves_files = True
    loads = True
    tls = True
    # HTTP/2 is on by default (--no-http2 turns it off): ALPN h2 before
    # http/1.1 on TLS listeners, h2c prior knowledge on cleartext ones
    h2 = True
    # HTTP/3 is on by default with TLS (the same port over UDP)
    h3 = True
    run_cargo = True  # bench/run --no-cargo: measure the binary as it is
    _built = False    # one cargo build per run for peregrine and peregrine-archive

    @property
    def env(self):
        # Started as root (as the bench machines run it), `serve` refuses to
        # stay root unless told; the peers run as root too, so this is what
        # is measured. Older builds ignore the variable.
        return {**os.environ, "PEREGRINE_ALLOW_ROOT": "1"}

    def prepare(self):
        # $PEREGRINE_BIN (as bench/lib/proxy.py takes it) names a build to
        # measure as it is, e.g. a saved binary beside the current one
        self.binary = os.environ.get("PEREGRINE_BIN") or os.path.join(REPO, "target", "release", "peregrine")
        if Peregrine._built and os.access(self.binary, os.X_OK):
            return None
        if os.environ.get("PEREGRINE_BIN"):
            reason = None if os.access(self.binary, os.X_OK) else f"PEREGRINE_BIN={self.binary} is not executable"
            if reason:
                log(f"WARNING: skipping {self.name}: {reason}")
            else:
                log(f"PEREGRINE_BIN: using {self.binary} as it is")
            Peregrine._built = reason is None
            return reason
        cargo = shutil.which("cargo") or os.path.expanduser("~/.cargo/bin/cargo")
        if not self.run_cargo:
            log("--no-cargo: using target/release/peregrine as it is")
            reason = None
        elif not os.access(cargo, os.X_OK):
            reason = "no cargo"
        else:
            log("cargo build --release -p peregrine-cli")
            r = subprocess.run([cargo, "build", "--release", "-p", "peregrine-cli"], cwd=REPO,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            reason = None if r.returncode == 0 else \
                "cargo build --release -p peregrine-cli failed:\n" + r.stdout.strip()[-1500:]
        if reason is None and not os.access(self.binary, os.X_OK):
            reason = f"{self.binary} is missing after the build"
        if reason:
            log(f"WARNING: skipping {self.name}: {reason}")
        Peregrine._built = reason is None
        return reason

    def argv(self, port, tmp):
        return [self.binary, "hello", "--bind", f"127.0.0.1:{port}", "--workers", "1"] + PEREGRINE_LOAD_LIMITS

    def files_argv(self, port, tmp, root):
        # the defaults: ETag, Last-Modified, Cache-Control: no-cache, the
        # three security headers, pre-compressed siblings looked for
        return [self.binary, "serve", root, "--bind", f"127.0.0.1:{port}", "--workers", "1"] + PEREGRINE_LOAD_LIMITS

    def load_argv(self, port, tmp, root, archive):
        """load100k: `serve DIR` of the 100,000-file tree (no load step)."""
        return self.files_argv(port, tmp, root)

    # The TLS scenarios: the same commands with the run's certificate
    # (rustls with the aws-lc-rs provider, its defaults: TLS 1.3 and 1.2, ALPN
    # http/1.1, no HSTS).
    def tls_argv(self, port, tmp, cert):
        return self.argv(port, tmp) + ["--tls-cert", cert.cert, "--tls-key", cert.key]

    def tls_files_argv(self, port, tmp, root, cert):
        return self.files_argv(port, tmp, root) + ["--tls-cert", cert.cert, "--tls-key", cert.key]

    def version(self):
        rev = subprocess.run(["git", "-C", REPO, "rev-parse", "--short=12", "HEAD"],
                             capture_output=True, text=True)
        dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--", "crates", "Cargo.toml", "Cargo.lock"],
                               capture_output=True, text=True)
        rev_s = rev.stdout.strip() if rev.returncode == 0 else "no commit"
        if dirty.stdout.strip():
            rev_s += " + uncommitted changes in crates/ or Cargo.*"
        if not self.run_cargo:
            # The binary may be any build (PEREGRINE_BIN): say which, from
            # its own `--version`, not the checkout's HEAD.
            mtime = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(os.path.getmtime(self.binary)))
            ver = subprocess.run([self.binary, "--version"], capture_output=True, text=True)
            built = [l.split(":", 1)[1].strip() for l in ver.stdout.splitlines() if l.startswith("revision:")]
            rev_s = f"checkout {rev_s}; not rebuilt (--no-cargo): binary {self.binary}, revision {built[0] if built else 'unknown'}, built {mtime}"
        rustc = subprocess.run([shutil.which("rustc") or os.path.expanduser("~/.cargo/bin/rustc"), "--version"],
                               capture_output=True, text=True)
        return f"git {rev_s}; {rustc.stdout.strip()}"


def pack(binary, root, out_path, log_path=None):
    """`peregrine pack root -o out_path` with pack's defaults (gzip, br and
    zstd variants, the default Cache-Control and security headers), as one
    process on the runner's CPUs (pack is single-threaded). Returns
    (seconds, archive bytes, pack's own summary line); raises RuntimeError
    if pack fails."""
    argv = [binary, "pack", root, "-o", out_path]
    t0 = time.monotonic()
    r = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    seconds = time.monotonic() - t0
    out = (r.stdout + r.stderr).strip()
    if log_path:
        with open(log_path, "a") as f:
            f.write("$ " + " ".join(argv) + f"\n{out}\n(exit {r.returncode} after {seconds:.2f} s)\n")
    if r.returncode != 0 or not os.path.exists(out_path):
        raise RuntimeError(f"{' '.join(argv)} failed (exit {r.returncode}): {out[-500:]}")
    return seconds, os.path.getsize(out_path), out.splitlines()[-1] if out else ""


class PeregrineArchive(Peregrine):
    """Peregrine's site-archive server: the run's file tree packed once with
    `peregrine pack`, served with `peregrine serve FILE.prg` (recognised by
    its magic bytes) from a memory map, with its defaults."""

    name = "peregrine-archive"
    hello = False
    serves_files = True
    loads = True
    h3 = False  # the h3 scenarios compare serve DIR with Caddy

    def __init__(self):
        self.archives = {}  # tree root -> its archive (the file scenarios' tree, real10k's)
        self.notes = []
        self.dir = None

    def _dir(self):
        if self.dir is None:
            self.dir = tempfile.mkdtemp(prefix="peregrine-bench-archive-")
            procs.add_cleanup(self.dir, lambda: shutil.rmtree(self.dir, ignore_errors=True))
        return self.dir

    def prepare_files(self, tree, log_path=None, name="files"):
        out = os.path.join(self._dir(), f"{name}.prg")
        log(f"{self.name}: peregrine pack {tree.root} -o {out}")
        try:
            seconds, size, said = pack(self.binary, tree.root, out, log_path)
        except RuntimeError as e:
            return str(e)
        self.archives[tree.root] = out
        note = (f"{name} archive: `peregrine pack TREE -o {name}.prg` took {seconds:.2f} s, "
                f"{size:,} bytes ({said})")
        self.notes.append(note)
        log(f"{self.name}: {note}")
        return None

    def setup_notes(self):
        return self.notes

    def files_argv(self, port, tmp, root):
        if root not in self.archives:
            raise RuntimeError(f"{root} was not packed (prepare_files did not run)")
        return [self.binary, "serve", self.archives[root], "--bind", f"127.0.0.1:{port}", "--workers", "1"] + PEREGRINE_LOAD_LIMITS

    def pack_many(self, root, log_path=None):
        """load100k: packs the 100,000-file tree once per run. Returns
        (archive path, seconds, bytes, pack's summary line); raises
        RuntimeError."""
        out = os.path.join(self._dir(), "many.prg")
        log(f"{self.name}: peregrine pack {root} -o {out}")
        seconds, size, said = pack(self.binary, root, out, log_path)
        return out, seconds, size, said

    def load_argv(self, port, tmp, root, archive):
        """load100k: the 100,000-file tree's archive."""
        return [self.binary, "serve", archive, "--bind", f"127.0.0.1:{port}", "--workers", "1"] + PEREGRINE_LOAD_LIMITS


class PeregrineCache(Peregrine):
    """Peregrine's reverse proxy with its response cache (issue 32):
    `peregrine serve EMPTY --proxy /=http://127.0.0.1:UP --proxy-cache 64M`
    in front of bench/limit/limit.c (`--response`), which answers every
    request with the tree's 17-byte file and the fields the archive sends
    with it (Content-Type, ETag, Last-Modified, Accept-Ranges,
    X-Content-Type-Options), `Cache-Control: max-age=86400` in place of the
    archive's `no-cache`. The first request of each server start (the
    readiness probe) fills the cache; every request measured is a hit, so
    its CPU is the hit path's, to set beside peregrine-archive's answer of
    the same bytes. Takes part in proxy-cache-hit only; the upstream is
    started once per run, pinned to the client's CPU (it answers once per
    server start)."""

    name = "peregrine-cache"
    hello = False
    serves_files = True
    loads = False
    tls = False
    h2 = False
    h3 = False

    def __init__(self):
        self.upstream_port = None
        self.dir = None

    def takes_part(self, point):
        return point.scenario == "proxy-cache-hit"

    def prepare(self):
        reason = super().prepare()
        if reason:
            return reason
        if not install.ensure_gcc():
            return "no gcc (the upstream is bench/limit/limit.c)"
        os.makedirs(BUILD, exist_ok=True)
        self.limit = os.path.join(BUILD, "limit")
        r = subprocess.run(["gcc", "-O2", "-Wall", "-o", self.limit, os.path.join(BENCH, "limit", "limit.c")],
                           capture_output=True, text=True)
        return None if r.returncode == 0 else "gcc failed: " + r.stderr.strip()[-500:]

    def prepare_files(self, tree, log_path=None, name="files"):
        if self.upstream_port is not None:
            return None
        self.dir = tempfile.mkdtemp(prefix="peregrine-bench-cache-")
        procs.add_cleanup(self.dir, lambda: shutil.rmtree(self.dir, ignore_errors=True))
        os.makedirs(os.path.join(self.dir, "empty"))
        body = tree.files["/17.txt"]
        mtime = os.path.getmtime(os.path.join(tree.root, "17.txt"))
        head = ("HTTP/1.1 200 OK\r\n"
                "Content-Type: text/plain; charset=utf-8\r\n"
                f"ETag: \"{len(body):x}-{int(mtime * 1e6) & (2**64 - 1):016x}\"\r\n"
                f"Last-Modified: {time.strftime('%a, %d %b %Y %H:%M:%S GMT', time.gmtime(mtime))}\r\n"
                "Accept-Ranges: bytes\r\n"
                "Cache-Control: max-age=86400\r\n"
                "X-Content-Type-Options: nosniff\r\n"
                f"Content-Length: {len(body)}\r\n\r\n")
        response = os.path.join(self.dir, "cacheable.http")
        with open(response, "wb") as f:
            f.write(head.encode() + body)
        self.upstream_port = free_port()
        # the client's CPU, chosen by the layout probe (load.WRK_CPU)
        argv = ["taskset", "-c", str(load.WRK_CPU), self.limit, str(self.upstream_port), "--response", response]
        out = open(log_path, "ab") if log_path else subprocess.DEVNULL
        proc = procs.spawn(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        procs.add_cleanup(f"{self.dir}-upstream", lambda: procs.kill(proc, grace_s=1.0))
        time.sleep(0.3)
        if proc.poll() is not None:
            return f"the upstream (limit --response) exited with {proc.returncode}"
        return None

    def setup_notes(self):
        return [f"peregrine-cache: upstream bench/limit/limit.c --response on 127.0.0.1:{self.upstream_port} "
                "(the 17-byte file with the archive's fields and Cache-Control: max-age=86400)"]

    def files_argv(self, port, tmp, root):
        return [self.binary, "serve", os.path.join(self.dir, "empty"), "--bind", f"127.0.0.1:{port}",
                "--workers", "1", "--proxy", f"/=http://127.0.0.1:{self.upstream_port}",
                "--proxy-cache", "64M"] + PEREGRINE_LOAD_LIMITS


# One client address opens up to 4,096 connections (c4096) to one worker:
# past Peregrine's defaults of 256 per address and 4,096 per worker (which
# keep a worker's worst-case memory under 1 GiB). nginx's configuration
# here raises worker_connections the same way.
PEREGRINE_LOAD_LIMITS = ["--conns-per-ip-max", "0", "--n-conns-max", "65536"]


class Nginx(Server):
    name = "nginx"
    serves_files = True
    loads = True
    tls = True
    h2 = True

    def prepare(self):
        if not install.ensure_nginx():
            return "nginx could not be installed"
        self.binary = install.nginx_binary()
        return None

    def argv(self, port, tmp):
        with open(os.path.join(PEERS, "nginx", "nginx.conf.in")) as f:
            conf = f.read().replace("@TMP@", tmp).replace("@PORT@", str(port))
        path = os.path.join(tmp, "nginx.conf")
        with open(path, "w") as f:
            f.write(conf)
        return [self.binary, "-p", tmp, "-c", path, "-e", os.path.join(tmp, "error.log")]

    def files_argv(self, port, tmp, root):
        path = _fill(os.path.join(PEERS, "nginx", "files.conf.in"), os.path.join(tmp, "nginx.conf"),
                     TMP=tmp, PORT=port, ROOT=root)
        return [self.binary, "-p", tmp, "-c", path, "-e", os.path.join(tmp, "error.log")]

    def load_argv(self, port, tmp, root, archive):
        """load100k: the same configuration on the unpacked 100,000-file tree."""
        return self.files_argv(port, tmp, root)

    def tls_files_argv(self, port, tmp, root, cert):
        """tls.conf.in: files.conf.in's settings with `ssl` on the listener,
        the run's certificate, TLS 1.3 with the one cipher suite rustls
        picks (tls.TLS13_CIPHERSUITE) and rustls' groups, and GET / answered
        with the hello as in nginx.conf.in."""
        path = _fill(os.path.join(PEERS, "nginx", "tls.conf.in"), os.path.join(tmp, "nginx.conf"),
                     TMP=tmp, PORT=port, ROOT=root, CERT=cert.cert, KEY=cert.key,
                     CIPHERSUITES=tls_.TLS13_CIPHERSUITE, GROUPS=tls_.GROUPS)
        return [self.binary, "-p", tmp, "-c", path, "-e", os.path.join(tmp, "error.log")]

    def h2_files_argv(self, port, tmp, root, cert):
        """h2.conf.in: files.conf.in's settings on an `http2` listener (nginx
        1.22's syntax), over TLS as tls.conf.in (`ssl http2`) or cleartext
        (`http2` alone: h2c with prior knowledge, and no HTTP/1.1)."""
        ssl = "" if cert is None else "\n    ".join([
            f"ssl_certificate {cert.cert};", f"ssl_certificate_key {cert.key};", "ssl_protocols TLSv1.3;",
            f"ssl_conf_command Ciphersuites {tls_.TLS13_CIPHERSUITE};", f"ssl_ecdh_curve {tls_.GROUPS};",
            "ssl_session_cache off;", "ssl_session_tickets off;"])
        path = _fill(os.path.join(PEERS, "nginx", "h2.conf.in"), os.path.join(tmp, "nginx.conf"),
                     TMP=tmp, PORT=port, ROOT=root, LISTEN="ssl http2" if cert else "http2", SSL=ssl)
        return [self.binary, "-p", tmp, "-c", path, "-e", os.path.join(tmp, "error.log")]

    def tls_argv(self, port, tmp, cert):
        # the same configuration; its root (the empty tmp/www) is never asked
        root = os.path.join(tmp, "www")
        os.makedirs(root, exist_ok=True)
        return self.tls_files_argv(port, tmp, root, cert)

    def version(self):
        r = subprocess.run([self.binary, "-v"], capture_output=True, text=True)
        return r.stderr.strip()


class Kawipiko(Server):
    """kawipiko-server on a CDB archive of the tree made by kawipiko-archiver
    (identity bodies, as wrk asks for no coding), with the options its own
    benchmarks use: the archive loaded into memory (--archive-inmem) and
    indexed (--index-all), one process and one thread. No hello mode."""

    name = "kawipiko"
    hello = False
    serves_files = True

    def __init__(self):
        self.archives = {}
        self.notes = []
        self.dir = None

    def prepare(self):
        self.binary = os.environ.get("KAWIPIKO") or shutil.which("kawipiko-server")
        if not self.binary or not os.access(self.binary, os.X_OK):
            return ("no kawipiko-server on PATH (KAWIPIKO=/path names one; its Go module is not "
                    "served by the module proxy here, so it is not built; bench/peers/kawipiko/build.sh "
                    "builds one from a copy of its source)")
        beside = os.path.join(os.path.dirname(self.binary), "kawipiko-archiver")
        self.archiver = os.environ.get("KAWIPIKO_ARCHIVER") or \
            (beside if os.access(beside, os.X_OK) else shutil.which("kawipiko-archiver"))
        if not self.archiver:
            return "kawipiko-server found, but no kawipiko-archiver beside it or on PATH (KAWIPIKO_ARCHIVER=/path)"
        return None

    def prepare_files(self, tree, log_path=None, name="files"):
        if self.dir is None:
            self.dir = tempfile.mkdtemp(prefix="peregrine-bench-kawipiko-")
            procs.add_cleanup(self.dir, lambda: shutil.rmtree(self.dir, ignore_errors=True))
        out = os.path.join(self.dir, f"{name}.cdb")
        argv = [self.archiver, "--sources", tree.root, "--archive", out, "--compress", "identity"]
        t0 = time.monotonic()
        r = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        seconds = time.monotonic() - t0
        if log_path:
            with open(log_path, "a") as f:
                f.write("$ " + " ".join(argv) + f"\n{r.stdout}{r.stderr}\n(exit {r.returncode})\n")
        if r.returncode != 0 or not os.path.exists(out):
            return f"kawipiko-archiver failed (exit {r.returncode}): {(r.stdout + r.stderr).strip()[-300:]}"
        self.archives[tree.root] = out
        self.notes.append(f"{name} archive: `kawipiko-archiver --compress identity` took {seconds:.2f} s, "
                          f"{os.path.getsize(out):,} bytes")
        return None

    def setup_notes(self):
        return self.notes

    def files_argv(self, port, tmp, root):
        return [self.binary, "--archive", self.archives[root], "--archive-inmem", "--index-all",
                "--bind", f"127.0.0.1:{port}", "--processes", "1", "--threads", "1"]

    def version(self):
        return f"kawipiko-server {self.binary}, kawipiko-archiver {self.archiver}"


class H2o(Server):
    name = "h2o"
    serves_files = True
    tls = True
    # h2 by ALPN on its TLS listeners and h2c with prior knowledge on its
    # cleartext ones, by default: files.conf.in serves both
    h2 = True

    def prepare(self):
        reason = install.ensure_h2o()
        if reason:
            return reason
        self.binary = install.h2o_binary()
        return None

    def argv(self, port, tmp):
        with open(os.path.join(PEERS, "h2o", "h2o.conf.in")) as f:
            conf = f.read().replace("@TMP@", tmp).replace("@PORT@", str(port))
        with open(os.path.join(tmp, "hello.txt"), "wb") as f:
            f.write(BODY)
        path = os.path.join(tmp, "h2o.conf")
        with open(path, "w") as f:
            f.write(conf)
        return [self.binary, "-c", path]

    def files_argv(self, port, tmp, root):
        path = _fill(os.path.join(PEERS, "h2o", "files.conf.in"), os.path.join(tmp, "h2o.conf"),
                     TMP=tmp, PORT=port, ROOT=root)
        return [self.binary, "-c", path]

    # The TLS scenarios: the same configurations with an ssl block on the
    # listener. h2o 2.2 cannot name TLS 1.3 suites; with OpenSSL's server
    # defaults and the client's order it picks what rustls picks (the
    # runner checks), so only the version is pinned. OCSP stapling off: it
    # would start a fetch-ocsp-response process (and the certificate has
    # no OCSP URI).
    SSL_BLOCK = ("  ssl:\n    certificate-file: {cert}\n    key-file: {key}\n"
                 "    minimum-version: TLSv1.3\n    ocsp-update-interval: 0\n")

    def _with_ssl(self, argv, port, cert):
        path = argv[-1]
        with open(path) as f:
            conf = f.read()
        listen = f"  port: {port}\n"
        if conf.count(listen) != 1:
            raise RuntimeError(f"{path}: no single '{listen.strip()}' line to add ssl to")
        conf = conf.replace(listen, listen + self.SSL_BLOCK.format(cert=cert.cert, key=cert.key))
        with open(path, "w") as f:
            f.write(conf)
        return argv

    def tls_argv(self, port, tmp, cert):
        return self._with_ssl(self.argv(port, tmp), port, cert)

    def tls_files_argv(self, port, tmp, root, cert):
        return self._with_ssl(self.files_argv(port, tmp, root), port, cert)

    def version(self):
        r = subprocess.run([self.binary, "--version"], capture_output=True, text=True)
        return r.stdout.splitlines()[0] if r.stdout else ""


class Lighttpd(Server):
    """File scenarios only: lighttpd has no fixed-response directive, and
    h2o already stands for "a file handler answering hello"."""

    name = "lighttpd"
    hello = False
    serves_files = True

    def prepare(self):
        reason = install.ensure_lighttpd()
        if reason:
            return reason
        self.binary = install.lighttpd_binary()
        return None

    def files_argv(self, port, tmp, root):
        path = _fill(os.path.join(PEERS, "lighttpd", "files.conf.in"), os.path.join(tmp, "lighttpd.conf"),
                     TMP=tmp, PORT=port, ROOT=root)
        return [self.binary, "-D", "-f", path]

    def version(self):
        r = subprocess.run([self.binary, "-v"], capture_output=True, text=True)
        return (r.stdout or r.stderr).strip().splitlines()[0]


class GoServer(Server):
    module = ""
    env = dict(os.environ, GOMAXPROCS="1")

    def prepare(self):
        go = install.go_binary()
        if go is None:
            return "no Go toolchain"
        src = os.path.join(PEERS, self.module)
        reason = install.ensure_go_modules(src)
        if reason:
            return reason
        os.makedirs(BUILD, exist_ok=True)
        self.binary = os.path.join(BUILD, self.module)
        r = subprocess.run([go, "build", "-o", self.binary, "."], cwd=src, env=install.go_env(),
                           capture_output=True, text=True, timeout=900)
        if r.returncode != 0:
            return "go build failed: " + r.stderr.strip()[-500:]
        return None

    def argv(self, port, tmp):
        return [self.binary, "-bind", f"127.0.0.1:{port}"]

    def version(self):
        r = subprocess.run([install.go_binary(), "version"], capture_output=True, text=True)
        return r.stdout.strip()


class GoNetHttp(GoServer):
    name = "go-nethttp"
    module = "go-nethttp"
    serves_files = True

    def files_argv(self, port, tmp, root):
        return [self.binary, "-bind", f"127.0.0.1:{port}", "-dir", root]


class GoFastHttp(GoServer):
    name = "go-fasthttp"
    module = "go-fasthttp"

    def version(self):
        fasthttp = "fasthttp version unknown"
        try:
            with open(os.path.join(PEERS, self.module, "go.sum")) as f:
                for line in f:
                    parts = line.split()
                    if parts and parts[0] == "github.com/valyala/fasthttp" and not parts[1].endswith("/go.mod"):
                        fasthttp = f"github.com/valyala/fasthttp {parts[1]} (go.sum)"
        except OSError:
            pass
        return f"{fasthttp}; {super().version()}"


class Node(Server):
    name = "node"

    def prepare(self):
        self.binary = shutil.which("node")
        return None if self.binary else "no node on PATH"

    def argv(self, port, tmp):
        return [self.binary, os.path.join(PEERS, "node", "hello.js"), f"127.0.0.1:{port}"]

    def version(self):
        r = subprocess.run([self.binary, "--version"], capture_output=True, text=True)
        return "node " + r.stdout.strip()


class Caddy(Server):
    """Caddy 2 (Debian's), for the h3 scenarios only: `file_server` on the
    run's tree over TLS with the run's certificate, protocols h1 h2 h3,
    GOMAXPROCS=1, its admin endpoint off."""

    name = "caddy"
    hello = False
    serves_files = True
    tls = True
    h3 = True

    def takes_part(self, point):
        return point.h3 and point.file_mode

    def prepare(self):
        if shutil.which("caddy") is None and not (install.apt_install("caddy") and shutil.which("caddy")):
            return "caddy is missing and apt-get install caddy failed"
        self.home = tempfile.mkdtemp(prefix="peregrine-bench-caddy-home-")
        procs.add_cleanup(self.home, lambda: shutil.rmtree(self.home, ignore_errors=True))
        self.env = {**os.environ, "GOMAXPROCS": "1", "XDG_DATA_HOME": os.path.join(self.home, "data"),
                    "XDG_CONFIG_HOME": os.path.join(self.home, "config")}
        return None

    def tls_files_argv(self, port, tmp, root, cert):
        conf = os.path.join(tmp, "Caddyfile")
        with open(conf, "w") as f:
            f.write("{\n\tadmin off\n\tauto_https disable_redirects\n\tservers {\n\t\tprotocols h1 h2 h3\n\t}\n}\n"
                    f"https://localhost:{port}, https://127.0.0.1:{port} {{\n\tbind 127.0.0.1\n"
                    f"\ttls {cert.cert} {cert.key}\n\troot * {root}\n\tfile_server\n}}\n")
        return ["caddy", "run", "--config", conf, "--adapter", "caddyfile"]

    def version(self):
        r = subprocess.run(["caddy", "version"], capture_output=True, text=True)
        return "caddy " + r.stdout.strip()


ALL = {cls.name: cls for cls in (Limit, Peregrine, PeregrineArchive, PeregrineCache, Nginx, Kawipiko, H2o, Lighttpd, GoFastHttp,
                                  GoNetHttp, Node, Caddy)}


def probe(port, timeout_s=1.0, path="/", body=BODY, ssl_ctx=None):
    """One GET over a fresh connection (over TLS with ssl_ctx). Returns None
    if the answer is the expected 200 with the body, else what went wrong."""
    try:
        with tls_.wrap(socket.create_connection(("127.0.0.1", port), timeout=timeout_s), ssl_ctx) as s:
            s.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
            buf = b""
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                chunk = s.recv(4096)
                if not chunk:
                    break
                buf += chunk
                if buf.endswith(body):
                    break
    except OSError as e:
        return f"{type(e).__name__}: {e}"
    if not buf.startswith(b"HTTP/1.1 200"):
        return f"unexpected answer {buf[:60]!r}"
    if not buf.endswith(body):
        return f"body is not {body!r}: {buf[-40:]!r}"
    return None


class Running:
    """A started server: its process group, port and temporary directory.
    With `tree` (a filetree.Tree), the server runs in its file mode; with
    `cert` (a tls.Cert), over TLS."""

    def __init__(self, server, log_path, tree=None, cert=None, h2_point=None):
        self.server = server
        self.tree = tree
        self.cert = cert
        self.h2_point = h2_point  # an h2 scenario's point: h2_files_argv, and ready over h2
        self.ssl_ctx = cert.client_context() if cert else None
        self.port = free_port()
        self.tmp = tempfile.mkdtemp(prefix=f"peregrine-bench-{server.name}-")
        self.log_path = log_path
        self.proc = None
        procs.add_cleanup(self.tmp, lambda: shutil.rmtree(self.tmp, ignore_errors=True))

    def start(self):
        """Starts and waits until ready. Returns None or the failure reason."""
        if self.h2_point is not None:
            mode_argv = self.server.h2_files_argv(self.port, self.tmp, self.tree.root, self.cert)
            path, body = self.tree.ready
            ready = dict(path=path, body=body)
        elif self.tree is None or self.server.files_hello:
            mode_argv = self.server.tls_argv(self.port, self.tmp, self.cert) if self.cert else \
                self.server.argv(self.port, self.tmp)
            ready = dict(path="/", body=BODY)
        else:
            mode_argv = self.server.tls_files_argv(self.port, self.tmp, self.tree.root, self.cert) \
                if self.cert else self.server.files_argv(self.port, self.tmp, self.tree.root)
            path, body = self.tree.ready
            ready = dict(path=path, body=body)
        ready["ssl_ctx"] = self.ssl_ctx
        self.launch(mode_argv)
        deadline = time.monotonic() + READY_TIMEOUT_S
        last = "not started"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return f"exited with {self.proc.returncode} before it was ready: " + self.log_tail()
            if self.h2_point is not None:
                # over h2 (curl): an nginx h2c listener speaks no HTTP/1.1
                last = h2_.ready(self.port, replace(self.h2_point, path=ready["path"]), ready["body"], self.cert)
            else:
                last = probe(self.port, **ready)
            if last is None:
                return None
            time.sleep(0.05)
        return f"not ready after {READY_TIMEOUT_S:.0f} s ({last}): " + self.log_tail()

    def launch(self, mode_argv):
        """Starts mode_argv pinned to the server CPU, its output to the log."""
        argv = ["taskset", "-c", SERVER_CPU] + mode_argv
        with open(self.log_path, "ab") as log_file:
            log_file.write(("$ " + " ".join(argv) + "\n").encode())
            log_file.flush()
            self.proc = procs.spawn(argv, stdout=log_file, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=self.server.env)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, n=600):
        try:
            with open(self.log_path, "rb") as f:
                data = f.read()
            # nginx and h2o log to files in tmp
            for name in ("error.log",):
                p = os.path.join(self.tmp, name)
                if os.path.exists(p):
                    with open(p, "rb") as f:
                        data += f.read()
            lines = [ln for ln in data.decode(errors="replace").splitlines()
                     if ln.strip() and not ln.startswith("$ ")]
            return " | ".join(lines)[-n:] or "(no output)"
        except OSError:
            return ""

    def stop(self):
        procs.kill(self.proc)
        for name in ("error.log",):
            p = os.path.join(self.tmp, name)
            if os.path.exists(p) and os.path.getsize(p):
                with open(p, "rb") as src, open(self.log_path, "ab") as dst:
                    dst.write(src.read())
        shutil.rmtree(self.tmp, ignore_errors=True)
        procs.remove_cleanup(self.tmp)
