"""The file tree the static-file scenarios serve, and the check that each
server answers them right before anything is measured.

One tree per run, in a temporary directory: every file server (peregrine
serve, nginx, h2o, lighttpd, Go's http.FileServer) serves the same
directory. The files have fixed contents and a fixed mtime, so their sizes,
contents and validators are the same from run to run (Peregrine's ETag is a
content hash; nginx's and lighttpd's derive from mtime and size).
peregrine-archive serves this same tree packed into an archive.

ManyFiles is the load100k scenario's tree: 100,000 small files with fixed
contents in three directory levels, written once per run when that scenario
runs. RealFiles is real10k's: 10,000 files of 1 to 20 KiB, and the shuffled
list of their paths that bench/wrk/paths.lua asks in turn.
"""
import hashlib
import os
import random
import shutil
import socket
import tempfile
import time

import tls

# name -> size in bytes; the scenarios in load.py name these paths
SIZES = {
    "17.txt": 17,
    "4k.txt": 4 * 1024,
    "64k.txt": 64 * 1024,
    "1m.txt": 1024 * 1024,  # h2-f1m, h2c-f1m
    "10m.txt": 10 * 1024 * 1024,
}
MTIME = 1_767_225_600  # 2026-01-01T00:00:00Z: Last-Modified is the same every run
SMALL = b"Hello, Peregrine\n"  # the 17-byte file
assert len(SMALL) == SIZES["17.txt"]


def content(name):
    """The fixed bytes of a file: printable lines (64 hex digits of
    SHA-256 of a counter, then a newline), cut to the file's size."""
    size = SIZES[name]
    if name == "17.txt":
        return SMALL
    lines, have, i = [], 0, 0
    while have < size:
        line = hashlib.sha256(b"peregrine-bench-%d" % i).hexdigest().encode() + b"\n"
        lines.append(line)
        have += len(line)
        i += 1
    return b"".join(lines)[:size]


class Tree:
    """The generated directory and the contents of its files."""

    def __init__(self, parent=None):
        self.root = tempfile.mkdtemp(prefix="peregrine-bench-files-", dir=parent)
        os.chmod(self.root, 0o755)
        self.files = {}
        for name in SIZES:
            data = content(name)
            path = os.path.join(self.root, name)
            with open(path, "wb") as f:
                f.write(data)
            os.chmod(path, 0o644)
            os.utime(path, (MTIME, MTIME))
            self.files["/" + name] = data
        # what servers.Running asks to know the server is ready
        self.ready = ("/17.txt", self.files["/17.txt"])

    def describe(self):
        return ", ".join(f"{name} ({len(self.files['/' + name]):,} B, sha256 "
                         f"{hashlib.sha256(self.files['/' + name]).hexdigest()[:12]})"
                         for name in SIZES)

    def remove(self):
        shutil.rmtree(self.root, ignore_errors=True)


class ManyFiles:
    """load100k's tree: N_FILES small text files, /DD/DD/DD.txt (10 top
    folders of 100 folders of 100 files: three levels), each 100 to 2,000
    bytes (spread evenly, about 1 KiB on average): a line with the file's
    own path, then text cut from a fixed pool of words (so every file is
    different and compresses like prose). Fixed contents and mtime."""

    N_FILES = 100_000
    N_PROBED = 1_000  # paths asked once each after the first answer

    def __init__(self, parent=None, n_files=N_FILES):
        self.n_files = n_files
        self.root = tempfile.mkdtemp(prefix="peregrine-bench-many-", dir=parent)
        os.chmod(self.root, 0o755)
        rng = random.Random(20260101)
        words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9)))
                 for _ in range(400)]
        pool = " ".join(rng.choice(words) for _ in range(400_000)).encode()
        self.pool = pool
        self.bytes = 0
        made = set()
        for i in range(n_files):
            path = self.path(i)
            folder = os.path.join(self.root, os.path.dirname(path[1:]))
            if folder not in made:
                os.makedirs(folder, mode=0o755, exist_ok=True)
                made.add(folder)
            data = self.content(i)
            disk = os.path.join(self.root, path[1:])
            with open(disk, "wb") as f:
                f.write(data)
            os.utime(disk, (MTIME, MTIME))
            self.bytes += len(data)
        for folder in made | {os.path.join(self.root, d) for d in os.listdir(self.root)}:
            os.utime(folder, (MTIME, MTIME))
        self.ready = (self.path(0), self.content(0))

    @staticmethod
    def path(i):
        return f"/{i // 10_000:02d}/{i // 100 % 100:02d}/{i % 100:02d}.txt"

    def size(self, i):
        return 100 + (i * 7_919) % 1_901

    def content(self, i):
        head = self.path(i).encode() + b"\n"
        n = self.size(i) - len(head)
        at = (i * 104_729) % (len(self.pool) - 2_000)
        return head + self.pool[at:at + n]

    def probed(self):
        """The N_PROBED indices asked after the first answer, spread over
        the tree: with 100,000 files one in each of the 1,000 folders, at
        varied names; the first is 0, the path the first GET asks for."""
        n = min(self.N_PROBED, self.n_files)
        stride = self.n_files // n
        return [k * stride + (k * 37) % stride for k in range(n)]

    def describe(self):
        return (f"{self.n_files:,} files /DD/DD/DD.txt (3 levels), 100 to 2,000 B each, "
                f"{self.bytes:,} B in all, mtime {MTIME}")

    def remove(self):
        shutil.rmtree(self.root, ignore_errors=True)


class RealFiles(ManyFiles):
    """real10k's tree (kawipiko's "real" scenario): N_FILES files,
    /D/D/DDD.txt (10 folders of 10 folders of 100 files: three levels),
    1 to 20 KiB each (spread evenly), written like ManyFiles' (the path,
    then prose from the fixed pool), and `list_path`: every path once, in an
    order shuffled with a fixed seed, one per line, for paths.lua."""

    N_FILES = 10_000
    SIZE_MIN, SIZE_MAX = 1024, 20 * 1024

    def __init__(self, parent=None):
        super().__init__(parent, self.N_FILES)
        order = [self.path(i) for i in range(self.n_files)]
        random.Random(12).shuffle(order)
        self.list_path = self.root + ".paths"
        with open(self.list_path, "w") as f:
            f.write("\n".join(order) + "\n")
        self.order = order

    @staticmethod
    def path(i):
        return f"/{i // 1000}/{i // 100 % 10}/{i % 100:03d}.txt"

    def size(self, i):
        return self.SIZE_MIN + (i * 7_919) % (self.SIZE_MAX - self.SIZE_MIN + 1)

    def content(self, i):
        head = self.path(i).encode() + b"\n"
        n = self.size(i) - len(head)
        at = (i * 104_729) % (len(self.pool) - self.SIZE_MAX)
        return head + self.pool[at:at + n]

    def checked(self):
        """Indices checked before measuring: the list's first, middle, last."""
        index = {p: i for i, p in enumerate(self.path(i) for i in range(self.n_files))}
        return [index[self.order[k]] for k in (0, len(self.order) // 2, -1)]

    def describe(self):
        return (f"{self.n_files:,} files /D/D/DDD.txt (3 levels), {self.SIZE_MIN:,} to {self.SIZE_MAX:,} B "
                f"each, {self.bytes:,} B in all, mtime {MTIME}; asked in the order of {self.list_path} "
                f"(shuffled with a fixed seed)")

    def remove(self):
        super().remove()
        try:
            os.remove(self.list_path)
        except OSError:
            pass


# -- checking answers ------------------------------------------------------

class WrongAnswer(Exception):
    """A server's answer is not the one the scenario measures."""


def _read_answer(sock, buf, method_head, deadline):
    """Reads one HTTP/1.1 answer from sock; returns (status, headers, body,
    rest); headers has the head's size in bytes under None."""
    def more():
        if time.monotonic() > deadline:
            raise WrongAnswer("no complete answer within the time allowed")
        chunk = sock.recv(1 << 20)
        if not chunk:
            raise WrongAnswer("the server closed the connection mid-answer")
        return chunk

    while b"\r\n\r\n" not in buf:
        buf += more()
    head, buf = buf.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise WrongAnswer(f"bad status line {lines[0][:80]!r}")
    status = int(parts[1])
    headers = {None: len(head) + 4}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers.setdefault(name.strip().lower(), value.strip())
    if method_head or status in (204, 304) or 100 <= status < 200:
        return status, headers, b"", buf
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = b""
        while True:
            while b"\r\n" not in buf:
                buf += more()
            size_line, buf = buf.split(b"\r\n", 1)
            size = int(size_line.split(b";")[0], 16)
            while len(buf) < size + 2:
                buf += more()
            body, buf = body + buf[:size], buf[size + 2:]
            if size == 0:
                return status, headers, body, buf
    if "content-length" not in headers:
        raise WrongAnswer(f"{status} answer without Content-Length or chunked body")
    n = int(headers["content-length"])
    while len(buf) < n:
        buf += more()
    return status, headers, buf[:n], buf[n:]


def get(port, path, headers=(), times=1, timeout_s=10.0, ssl_ctx=None):
    """`times` GETs of path on one keep-alive connection; the answers as
    (status, headers with lower-case names and the head's size under None,
    body). ssl_ctx: over TLS with that client context (tls.Cert's, which
    verifies the run's certificate)."""
    req = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n" + \
        "".join(h + "\r\n" for h in headers) + "\r\n"
    deadline = time.monotonic() + timeout_s
    out, buf = [], b""
    try:
        with tls.wrap(socket.create_connection(("127.0.0.1", port), timeout=timeout_s), ssl_ctx) as s:
            for _ in range(times):
                s.sendall(req.encode("latin-1"))
                status, hdrs, body, buf = _read_answer(s, buf, False, deadline)
                out.append((status, hdrs, body))
    except OSError as e:
        raise WrongAnswer(f"{type(e).__name__}: {e}") from e
    return out


def get_many(port, paths, timeout_s=60.0):
    """One GET of each path, in turn, on one keep-alive connection;
    [(status, body)]."""
    deadline = time.monotonic() + timeout_s
    out, buf = [], b""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as s:
            for path in paths:
                s.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode("latin-1"))
                status, _h, body, buf = _read_answer(s, buf, False, deadline)
                out.append((status, body))
    except OSError as e:
        raise WrongAnswer(f"{type(e).__name__}: {e}") from e
    return out


def _show(status, headers, body):
    return f"{status} with {len(body):,} body bytes" + \
        (f" ({body[:60]!r})" if status >= 400 or len(body) < 60 else "")


def check(port, point, tree, hello_body=None, ssl_ctx=None):
    """Checks the answers a file scenario measures, with the requests wrk
    will send: twice each on one keep-alive connection (the second from the
    server's cache, when it has one).

    Returns (the header lines wrk must send, the body bytes each answer
    carries, the head bytes (status line and fields) of the last answer,
    what was checked). Raises WrongAnswer.

    hello_body: the server answers every request with this canned body (the
    limit server; or a hello scenario, tls-c50), which is then what is
    checked. ssl_ctx: over TLS (the TLS scenarios), verifying the run's
    certificate."""
    kind = point.kind
    if kind == "hello":
        for status, h, body in get(port, point.path, times=2, ssl_ctx=ssl_ctx):
            if status != 200 or body != hello_body:
                raise WrongAnswer(f"GET {point.path}: expected 200 with {hello_body!r}, got {_show(status, h, body)}")
        return [], len(hello_body), h[None], f"200, {len(hello_body)} B hello"
    if hello_body is not None:
        # limit parses nothing: it gets the same kind of request, whatever
        # the header says, and answers its hello
        extra = {"304": ['If-None-Match: "limit-has-no-etag"'],
                 "range": ["Range: bytes=0-1023"]}.get(kind, [])
        for status, h, body in get(port, point.path, extra, times=2):
            if status != 200 or body != hello_body:
                raise WrongAnswer(f"expected its canned 200 hello, got {_show(status, {}, body)}")
        return extra, len(hello_body), h[None], "200 hello"
    data = tree.files[point.path]
    if kind == "file":
        for status, h, body in get(port, point.path, times=2, ssl_ctx=ssl_ctx):
            if status != 200:
                raise WrongAnswer(f"GET {point.path}: expected 200, got {_show(status, h, body)}")
            if body != data:
                raise WrongAnswer(f"GET {point.path}: body of {len(body):,} bytes is not the "
                                  f"file's {len(data):,}")
        return [], len(data), h[None], f"200, {len(data)} B body equal to the file"
    if kind == "304":
        [(status, h, body)] = get(port, point.path)
        if status != 200 or body != data:
            raise WrongAnswer(f"GET {point.path}: expected 200 with the file, got {_show(status, h, body)}")
        etag = h.get("etag")
        if not etag:
            raise WrongAnswer(f"GET {point.path}: no ETag in the answer, so no If-None-Match can match")
        extra = [f"If-None-Match: {etag}"]
        for status, h, body in get(port, point.path, extra, times=2):
            if status != 304:
                raise WrongAnswer(f"GET {point.path} with If-None-Match {etag}: expected 304, "
                                  f"got {_show(status, h, body)}")
        return extra, 0, h[None], f"304 for If-None-Match {etag}"
    if kind == "range":
        extra = ["Range: bytes=0-1023"]
        want_cr = f"bytes 0-1023/{len(data)}"
        for status, h, body in get(port, point.path, extra, times=2):
            if status != 206:
                raise WrongAnswer(f"GET {point.path} with Range bytes=0-1023: expected 206, "
                                  f"got {_show(status, h, body)}")
            if h.get("content-range") != want_cr:
                raise WrongAnswer(f"Content-Range {h.get('content-range')!r}, expected {want_cr!r}")
            if body != data[:1024]:
                raise WrongAnswer(f"206 body of {len(body):,} bytes is not the file's first 1,024")
        return extra, 1024, h[None], f"206, Content-Range {want_cr}, 1024 B body"
    raise ValueError(f"unknown kind {kind}")


def check_real(port, real):
    """real10k: GETs of the list's first, middle and last path on one
    connection, each 200 with the file's bytes. Returns what was checked;
    raises WrongAnswer."""
    indices = real.checked()
    answers = get_many(port, [real.path(i) for i in indices])
    for i, (status, body) in zip(indices, answers):
        if status != 200 or body != real.content(i):
            raise WrongAnswer(f"GET {real.path(i)}: expected 200 with its {real.size(i):,} bytes, got "
                              f"{_show(status, {}, body)}")
    return f"200 with the file's bytes for {', '.join(real.path(i) for i in indices)}"
