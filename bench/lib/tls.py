"""The TLS scenarios' certificate, client context and negotiation check.

One throwaway certificate per run (when a TLS scenario runs): ECDSA P-256,
self-signed, CN=localhost with subjectAltName DNS:localhost and
IP:127.0.0.1, made with the openssl CLI into a temporary directory that is
removed at the end of the run. Every TLS server (peregrine,
peregrine-archive, nginx, h2o) is given the same certificate and key.

wrk (Debian's, built with OpenSSL) connects with OpenSSL's default client
settings: it sets no cipher list, no groups and no ALPN. `negotiated` asks
each server what it picks for that offer with `openssl s_client` (the same
library and the same defaults as wrk), so the run records, and checks, that
every server ends on the same protocol, cipher suite and key-exchange group.
"""
import hashlib
import os
import re
import shutil
import ssl
import subprocess
import tempfile

import install
import procs

# What the nginx peer is pinned to (bench/peers/nginx/tls.conf.in): what
# rustls (Peregrine, aws-lc-rs provider, client order) picks for OpenSSL's
# default client offer, whose TLS 1.3 order is AES-256-GCM, CHACHA20,
# AES-128-GCM. The runner checks both servers with `negotiated` and warns
# when they differ.
TLS13_CIPHERSUITE = "TLS_AES_256_GCM_SHA384"
# Peregrine's classical key-exchange groups, in its order (tls::provider());
# it prefers X25519MLKEM768 before them, which neither wrk's OpenSSL 3.0 nor
# Debian's nginx has, so these runs end on X25519 on both sides.
GROUPS = "X25519:prime256v1:secp384r1"


def log(msg):
    print(f"bench: {msg}", flush=True)


def ensure_openssl():
    return shutil.which("openssl") is not None or (
        install.apt_install("openssl") and shutil.which("openssl") is not None)


class Cert:
    """A throwaway self-signed ECDSA P-256 certificate and its key."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="peregrine-bench-tls-")
        procs.add_cleanup(self.dir, self.remove)
        self.cert = os.path.join(self.dir, "cert.pem")
        self.key = os.path.join(self.dir, "key.pem")
        argv = ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                "-nodes", "-keyout", self.key, "-out", self.cert, "-days", "2", "-sha256",
                "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"]
        r = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if r.returncode != 0 or not os.path.exists(self.cert):
            raise RuntimeError(f"{' '.join(argv)} failed: {(r.stdout + r.stderr).strip()[-500:]}")
        os.chmod(self.dir, 0o755)  # readable by nginx whatever user it runs as
        os.chmod(self.cert, 0o644)
        os.chmod(self.key, 0o644)
        self.command = " ".join(argv[:7] + ["-nodes", "-days", "2", "-sha256", "-subj", "/CN=localhost",
                                            "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"])
        with open(self.cert, "rb") as f:
            der = ssl.PEM_cert_to_DER_cert(f.read().decode())
        self.sha256 = hashlib.sha256(der).hexdigest()

    def describe(self):
        return (f"self-signed ECDSA P-256 (prime256v1) certificate, signature ecdsa-with-SHA256, "
                f"CN=localhost, subjectAltName DNS:localhost, IP:127.0.0.1, made for this run with "
                f"`{self.command}`; DER SHA-256 {self.sha256[:16]}...; the same cert.pem and key.pem "
                f"for every TLS server")

    def client_context(self):
        """A client context that trusts only this certificate and checks
        the name (127.0.0.1, as wrk's URL)."""
        ctx = ssl.create_default_context(cafile=self.cert)
        ctx.check_hostname = True
        ctx.verify_mode = ssl.CERT_REQUIRED
        return ctx

    def remove(self):
        shutil.rmtree(self.dir, ignore_errors=True)


def wrap(sock, ctx):
    """sock over TLS with ctx (verifying 127.0.0.1), or sock itself."""
    if ctx is None:
        return sock
    return ctx.wrap_socket(sock, server_hostname="127.0.0.1")


def negotiated(port, cert, timeout_s=15):
    """What a server picks for OpenSSL's default client offer (wrk's):
    `openssl s_client -brief` with no cipher, group or version options,
    verifying the chain against the run's certificate. Returns a dict with
    protocol, cipher, group, signature and verification, or raises
    RuntimeError."""
    argv = ["openssl", "s_client", "-connect", f"127.0.0.1:{port}", "-brief",
            "-CAfile", cert.cert, "-verify_return_error", "-verify_ip", "127.0.0.1"]
    try:
        r = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=timeout_s)
    except subprocess.TimeoutExpired as e:
        raise RuntimeError(f"openssl s_client gave no answer within {timeout_s} s") from e
    out = r.stdout + r.stderr

    def field(name):
        m = re.search(rf"^{re.escape(name)}:\s*(.+)$", out, re.M)
        return m.group(1).strip() if m else ""

    got = {"protocol": field("Protocol version"), "cipher": field("Ciphersuite"),
           "group": field("Server Temp Key") or field("Negotiated TLS1.3 group"),
           "signature": " ".join(x for x in (field("Peer signature type") or field("Signature type"),
                                              field("Hash used")) if x),
           "verification": field("Verification")}
    if not got["protocol"] or not got["cipher"]:
        raise RuntimeError(f"openssl s_client: no handshake ({out.strip()[-300:]})")
    if got["verification"] != "OK":
        raise RuntimeError(f"openssl s_client: verification {got['verification'] or 'failed'} "
                           f"({out.strip()[-300:]})")
    return got


def short(got):
    """E.g. "TLSv1.3 TLS_AES_256_GCM_SHA384 X25519 (ECDSA SHA256)"."""
    group = got["group"].split(",")[0]
    return f"{got['protocol']} {got['cipher']} {group}" + \
        (f" ({got['signature']})" if got.get("signature") else "")
