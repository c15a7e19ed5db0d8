"""Installs what the bench needs, only when missing, so every run may call it.

Debian packages (wrk, nginx-light, h2o and lighttpd if Debian has them, gcc), matplotlib in
bench/.venv, and the Go modules of the fasthttp peer through the Go module
proxy. Each step reports what it did; a step that fails leaves the servers
that need it to be skipped, it does not stop the run.
"""
import os
import shutil
import subprocess
import sys

BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV = os.path.join(BENCH, ".venv")
VENV_PYTHON = os.path.join(VENV, "bin", "python")

_apt_updated = False
# apt-get is run under this lock (flock(1)) when flock is there: dpkg's own
# lock makes a second apt-get fail at once instead of waiting, and several
# people may run bench/run, or apt-get, on one machine.
APT_LOCK = "/tmp/peregrine-apt.lock"


def log(msg):
    print(f"bench: {msg}", flush=True)


def _apt_env():
    return dict(os.environ, DEBIAN_FRONTEND="noninteractive")


def _apt_get(*args):
    """apt-get ARGS, waiting for APT_LOCK; its exit code."""
    argv = ["apt-get", *args]
    if shutil.which("flock"):
        argv = ["flock", APT_LOCK] + argv
    return subprocess.call(argv, env=_apt_env(), stdout=subprocess.DEVNULL)


def apt_update():
    global _apt_updated
    if _apt_updated:
        return True
    log("apt-get update")
    rc = _apt_get("update", "-qq")
    _apt_updated = rc == 0
    return _apt_updated


def apt_installed(pkg):
    r = subprocess.run(["dpkg-query", "-W", "-f=${Status}", pkg],
                       capture_output=True, text=True)
    return r.returncode == 0 and "install ok installed" in r.stdout


def apt_candidate(pkg):
    """Debian's candidate version of pkg, or None if Debian has none."""
    r = subprocess.run(["apt-cache", "policy", pkg], capture_output=True, text=True)
    for line in r.stdout.splitlines():
        line = line.strip()
        if line.startswith("Candidate:"):
            version = line.split(":", 1)[1].strip()
            return None if version == "(none)" else version
    return None


def apt_install(*pkgs):
    missing = [p for p in pkgs if not apt_installed(p)]
    if not missing:
        return True
    if shutil.which("apt-get") is None:
        log(f"no apt-get to install {' '.join(missing)}")
        return False
    apt_update()
    log(f"apt-get install {' '.join(missing)}")
    rc = _apt_get("install", "-y", "-qq", "--no-install-recommends", *missing)
    return rc == 0


def ensure_wrk():
    return shutil.which("wrk") is not None or (apt_install("wrk") and shutil.which("wrk") is not None)


def ensure_gcc():
    return shutil.which("gcc") is not None or (apt_install("gcc", "libc6-dev") and shutil.which("gcc") is not None)


def ensure_nginx():
    if nginx_binary():
        return True
    if not apt_install("nginx-light"):
        apt_install("nginx")
    return nginx_binary() is not None


def nginx_binary():
    return shutil.which("nginx") or next(
        (p for p in ("/usr/sbin/nginx",) if os.access(p, os.X_OK)), None)


def h2o_binary():
    return shutil.which("h2o") or next(
        (p for p in ("/usr/bin/h2o", "/usr/sbin/h2o") if os.access(p, os.X_OK)), None)


def ensure_h2o():
    """Installs h2o if Debian has it. Returns a reason string when it cannot."""
    if h2o_binary():
        return None
    apt_update()
    if apt_candidate("h2o") is None:
        return "Debian has no h2o package here"
    if not apt_install("h2o") or not h2o_binary():
        return "apt-get install h2o failed"
    return None


def lighttpd_binary():
    return shutil.which("lighttpd") or next(
        (p for p in ("/usr/sbin/lighttpd",) if os.access(p, os.X_OK)), None)


def ensure_lighttpd():
    """Installs lighttpd (file scenarios only) if Debian has it. Returns a
    reason string when it cannot. Like nginx's, Debian's package starts a
    service on port 80 where init scripts may run (not in containers whose
    policy-rc.d forbids it); bench/run never uses it, it starts its own."""
    if lighttpd_binary():
        return None
    apt_update()
    if apt_candidate("lighttpd") is None:
        return "Debian has no lighttpd package here"
    if not apt_install("lighttpd") or not lighttpd_binary():
        return "apt-get install lighttpd failed"
    return None


def go_binary():
    return shutil.which("go") or next(
        (p for p in ("/usr/local/go/bin/go",) if os.access(p, os.X_OK)), None)


def go_env():
    # GOTOOLCHAIN=local: never download another toolchain; -mod=mod lets the
    # build record what it fetched from the Go module proxy.
    # -buildvcs=false: the peers live inside Peregrine's repo; stamping them
    # with its git state is pointless and fails where git is missing.
    return dict(os.environ, GOTOOLCHAIN="local", GOFLAGS="-mod=mod -buildvcs=false")


def ensure_go_modules(module_dir):
    """Downloads a Go module's dependencies. Returns a reason string on failure."""
    go = go_binary()
    if go is None:
        return "no Go toolchain (looked for go on PATH and /usr/local/go/bin/go)"
    r = subprocess.run([go, "mod", "download"], cwd=module_dir, env=go_env(),
                       capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        return "go mod download failed: " + r.stderr.strip().splitlines()[-1:][0] if r.stderr.strip() else "go mod download failed"
    return None


def ensure_venv():
    """bench/.venv with matplotlib. Returns the venv's python, or None."""
    def has_matplotlib():
        return os.access(VENV_PYTHON, os.X_OK) and subprocess.call(
            [VENV_PYTHON, "-c", "import matplotlib"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) == 0

    if has_matplotlib():
        return VENV_PYTHON
    if not os.access(VENV_PYTHON, os.X_OK):
        log(f"creating {VENV}")
        if subprocess.call([sys.executable, "-m", "venv", VENV]) != 0:
            # Debian's python3 needs python3-venv for ensurepip
            shutil.rmtree(VENV, ignore_errors=True)
            apt_install("python3-venv")
            if subprocess.call([sys.executable, "-m", "venv", VENV]) != 0:
                log("could not create the venv: charts will be skipped")
                return None
    log("pip install -r bench/requirements.txt (matplotlib)")
    rc = subprocess.call([VENV_PYTHON, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                          "-r", os.path.join(BENCH, "requirements.txt")])
    if rc != 0 or not has_matplotlib():
        log("pip could not install matplotlib: charts will be skipped")
        return None
    return VENV_PYTHON
