//! Kernel TLS end to end, in a virtual machine: the machines these tests
//! run on may have no `tls` module (this one's kernel has none), so the
//! test boots Debian's 6.1 kernel under QEMU (TCG: no KVM needed) with an
//! initramfs made here: busybox, the kernel's `tls` and crypto modules,
//! and this very test binary, which inside the VM (`INSIDE_VAR` set) starts
//! a server and fetches files over TLS 1.3 with a rustls client, one VM
//! boot for every case:
//!
//! - per cipher the kernel takes (AES-128-GCM, AES-256-GCM, ChaCha20-Poly1305):
//!   a 1 MiB, a 100 KiB, a small and the 1 MiB file again on one keep-alive
//!   connection, every byte checked, the switch counted once
//!   (`peregrine_tls_ktls_total{event="enabled"}`);
//! - then a client KeyUpdate on that connection: it ends, with our
//!   close_notify (a clean end for rustls), counted `peer_keyupdate`;
//! - a client close_notify on a kTLS connection: answered with ours,
//!   counted `peer_close_notify`;
//! - TLS 1.2 (which never switches) still gets the file intact, counted
//!   `fallback`.
//!
//! The VM is for correctness only: TCG emulates the CPU, so no figure
//! from it means anything. Where QEMU, busybox or the kernel cannot be
//! had, the test says so and passes without running (as the other tests
//! that need a program do when it cannot be installed).

use std::cell::RefCell;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use peregrine::{Body, FileRange, Metrics, Request, Response, Server, TlsConfig};
use test_support::http::Client;
use test_support::install::{find_or_install, Program};
use test_support::pki::{self, Pki, Tls};

/// Set in the VM: run the cases instead of booting one.
const INSIDE_VAR: &str = "PEREGRINE_KTLS_VM_INSIDE";
/// The line the cases print when all passed, which the host looks for.
const PASSED: &str = "KTLS-VM: PASSED";
/// The kernel: Debian's (12's is 6.1), whose `tls` module (CONFIG_TLS=m)
/// has TLS 1.3 AES-GCM and ChaCha20-Poly1305 (since 5.11). Any installed
/// kernel with that module will do; else the one `linux-image-amd64` names
/// today (Debian drops an ABI's package from its mirror when the next one
/// comes, so the name is never written here).
const KERNEL_META: &str = "linux-image-amd64";
/// The longest the VM may run (boot about 12 s under TCG, the cases a few
/// tens of seconds); past it the VM is killed and the test fails.
const VM_TIMEOUT: Duration = Duration::from_secs(240);

#[test]
fn ktls_serves_files_and_ends_on_key_update_in_a_vm() {
    if std::env::var_os(INSIDE_VAR).is_some() {
        inside();
        println!("{PASSED}");
        return;
    }
    let Some(vm) = Vm::prepare() else { return };
    let output = vm.run();
    eprintln!("ktls_vm: the VM's console:\n{output}");
    assert!(
        output.lines().any(|l| l.trim_end() == PASSED),
        "the cases failed in the VM; its console:\n{output}"
    );
}

// ---- inside the VM ----

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 11) as u8)
        .collect()
}

/// A TLS stream the HTTP client reads and writes, which the test can
/// still reach (for KeyUpdate and close_notify).
#[derive(Clone)]
struct Shared(Rc<RefCell<Tls>>);

impl Read for Shared {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.0.borrow_mut().read(buf)
    }
}

impl Write for Shared {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.borrow_mut().write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.borrow_mut().flush()
    }
}

fn counted(metrics: &Metrics, event: &str) -> u64 {
    let text = metrics.render();
    let key = format!("peregrine_tls_ktls_total{{event=\"{event}\"}} ");
    let line = text
        .lines()
        .find(|l| l.starts_with(&key))
        .unwrap_or_else(|| panic!("no {key} in\n{text}"));
    line[key.len()..].parse().unwrap()
}

fn get(path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").into_bytes()
}

/// The server's answer to the client's end: `Ok(0)` from rustls, which
/// only a close_notify gives (a bare FIN is UnexpectedEof).
fn assert_ends_with_close_notify(tls: &Rc<RefCell<Tls>>, what: &str) {
    let mut buf = [0u8; 4096];
    match tls.borrow_mut().read(&mut buf) {
        Ok(0) => {}
        other => panic!("{what}: the connection did not end with close_notify: {other:?}"),
    }
}

fn inside() {
    let pki = Pki::new("ktls-vm");
    let (cert, key, _) = pki.issue("localhost", &["localhost"]);
    let big = pattern(1024 * 1024, 1);
    let mid = pattern(100 * 1024, 2);
    let dir = pki.dir().to_owned();
    std::fs::write(dir.join("big"), &big).unwrap();
    std::fs::write(dir.join("mid"), &mid).unwrap();
    let status = peregrine::kernel_tls_status(peregrine::KernelTls::Auto);
    println!("{status}");
    assert!(status.starts_with("kTLS: on"), "{status}");
    let handler = move |req: &Request<'_>| -> Response {
        match req.path() {
            "/big" | "/mid" => {
                let file = std::fs::File::open(dir.join(&req.path()[1..])).unwrap();
                Response::bytes("application/octet-stream", Body::File(FileRange::whole(file).unwrap()))
            }
            "/small" => Response::text("small answer"),
            _ => Response::error(404),
        }
    };
    let metrics = Arc::new(Metrics::new());
    let server = Server::new()
        .bind_tls("127.0.0.1:0", TlsConfig::from_pem_files(&cert, &key).unwrap())
        .workers(1)
        .metrics(metrics.clone())
        .start(handler)
        .expect("server starts");
    let addr = server.local_addr();
    let suites = [
        rustls::crypto::ring::cipher_suite::TLS13_AES_128_GCM_SHA256,
        rustls::crypto::ring::cipher_suite::TLS13_AES_256_GCM_SHA384,
        rustls::crypto::ring::cipher_suite::TLS13_CHACHA20_POLY1305_SHA256,
    ];
    let config_for = |suite: rustls::SupportedCipherSuite, versions: &[&'static rustls::SupportedProtocolVersion]| {
        let mut roots = rustls::RootCertStore::empty();
        use rustls::pki_types::pem::PemObject;
        let ca = rustls::pki_types::CertificateDer::from_pem_slice(pki.ca_pem().as_bytes()).unwrap();
        roots.add(ca).unwrap();
        let provider = rustls::crypto::CryptoProvider {
            cipher_suites: vec![suite],
            ..rustls::crypto::ring::default_provider()
        };
        let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(provider))
            .with_protocol_versions(versions)
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Arc::new(config)
    };
    for suite in suites {
        let name = format!("{:?}", suite.suite());
        let started = Instant::now();
        let enabled = counted(&metrics, "enabled");
        let tls = Rc::new(RefCell::new(pki::connect(
            addr,
            &config_for(suite, &[&rustls::version::TLS13]),
            "localhost",
        )));
        assert_eq!(
            tls.borrow().conn.negotiated_cipher_suite().map(|s| s.suite()),
            Some(suite.suite())
        );
        let mut c = Client::over(Shared(tls.clone()));
        // The switch, then more answers over the kernel's records on the
        // same connection: large (sendfile), small (write), large again.
        for (path, want) in [
            ("/big", &big[..]),
            ("/mid", &mid[..]),
            ("/small", b"small answer"),
            ("/big", &big[..]),
        ] {
            c.send(&get(path));
            let r = c.response();
            assert_eq!(r.status, 200, "{name} {path}");
            assert!(r.body == want, "{name} {path}: body differs ({} bytes)", r.body.len());
            // The switch comes before the first file's first byte.
            assert_eq!(
                counted(&metrics, "enabled"),
                enabled + 1,
                "{name} {path}: one switch, at the first file"
            );
        }
        // A KeyUpdate cannot be followed by the kernel: the connection
        // ends, cleanly, counted.
        let keyupdates = counted(&metrics, "peer_keyupdate");
        tls.borrow_mut().conn.refresh_traffic_keys().expect("KeyUpdate");
        tls.borrow_mut().flush().unwrap();
        assert_ends_with_close_notify(&tls, &format!("{name} after KeyUpdate"));
        assert_eq!(counted(&metrics, "peer_keyupdate"), keyupdates + 1, "{name}");
        println!(
            "KTLS-VM: {name}: 2.1 MiB on one connection, KeyUpdate ends it ({:?})",
            started.elapsed()
        );

        // The client's close_notify on a kTLS connection.
        let tls = Rc::new(RefCell::new(pki::connect(
            addr,
            &config_for(suite, &[&rustls::version::TLS13]),
            "localhost",
        )));
        let mut c = Client::over(Shared(tls.clone()));
        let enabled = counted(&metrics, "enabled");
        c.send(&get("/mid"));
        assert!(c.response().body == mid, "{name}: /mid differs");
        // A 100 KiB file right after the handshake: the session tickets
        // rustls queued go out first, then the switch.
        assert_eq!(counted(&metrics, "enabled"), enabled + 1, "{name}: /mid switched");
        let notified = counted(&metrics, "peer_close_notify");
        tls.borrow_mut().conn.send_close_notify();
        tls.borrow_mut().flush().unwrap();
        assert_ends_with_close_notify(&tls, &format!("{name} after close_notify"));
        assert_eq!(counted(&metrics, "peer_close_notify"), notified + 1, "{name}");
    }
    // TLS 1.2 stays with rustls: intact, counted as a fallback.
    let fallbacks = counted(&metrics, "fallback");
    let enabled = counted(&metrics, "enabled");
    let mut tls12 = pki.client_config(&[&rustls::version::TLS12]);
    tls12.alpn_protocols = vec![b"http/1.1".to_vec()];
    let tls12 = Arc::new(tls12);
    let mut c = Client::over(pki::connect(addr, &tls12, "localhost"));
    c.send(&get("/big"));
    assert!(c.response().body == big, "TLS 1.2 /big differs");
    assert_eq!(counted(&metrics, "fallback"), fallbacks + 1);
    assert_eq!(counted(&metrics, "enabled"), enabled);
    assert_eq!(counted(&metrics, "failed"), 0);
    drop(server);
}

// ---- on the host ----

struct Vm {
    qemu: PathBuf,
    kernel: PathBuf,
    initramfs: PathBuf,
    _dir: Scratch,
}

/// A directory removed when dropped.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The modules the VM loads, each after what it depends on (from the
/// kernel's modules.dep): kTLS and the AEADs it asks the crypto API for.
const MODULES: &[&str] = &[
    "tls",
    "gcm",
    "ghash-generic",
    "ctr",
    "aesni-intel",
    "ghash-clmulni-intel",
    "chacha20poly1305",
    "chacha-generic",
    "chacha-x86_64",
    "poly1305-generic",
    "poly1305-x86_64",
];

impl Vm {
    /// Everything to boot, or None (said why) where it cannot be had.
    fn prepare() -> Option<Vm> {
        let skip = |why: String| {
            eprintln!("SKIPPED ktls_vm: {why}");
            None
        };
        let programs = [
            Program {
                var: "QEMU",
                names: &["qemu-system-x86_64"],
                package: "qemu-system-x86",
            },
            Program {
                var: "BUSYBOX_STATIC",
                names: &["busybox"],
                package: "busybox-static",
            },
        ];
        let found = match find_or_install(&programs) {
            Ok(found) => found,
            Err(e) => return skip(format!("QEMU or busybox cannot be installed: {e}")),
        };
        let (qemu, busybox) = (found[0].clone(), found[1].clone());
        let dir = Scratch(std::env::temp_dir().join(format!("peregrine-ktls-vm-{}", std::process::id())));
        let _ = std::fs::remove_dir_all(&dir.0);
        std::fs::create_dir_all(&dir.0).unwrap();
        let Some((root, version)) = kernel_files(&dir.0) else {
            return skip(format!(
                "no kernel with a tls module is installed and {KERNEL_META}'s cannot be downloaded"
            ));
        };
        let kernel = root.join(format!("boot/vmlinuz-{version}"));
        let modules = root.join(format!("lib/modules/{version}"));
        let order = match module_order(&modules, MODULES) {
            Ok(order) => order,
            Err(e) => return skip(e),
        };
        let initramfs = dir.0.join("initramfs.cpio");
        if let Err(e) = make_initramfs(&initramfs, &busybox, &modules, &order) {
            return skip(format!("cannot make the initramfs: {e}"));
        }
        Some(Vm {
            qemu,
            kernel,
            initramfs,
            _dir: dir,
        })
    }

    /// Boots the VM, waits for it to power off, and returns its console.
    fn run(&self) -> String {
        let mut child = Command::new(&self.qemu)
            .args([
                "-cpu",
                "max",
                "-m",
                "1G",
                "-smp",
                "1",
                "-nographic",
                "-no-reboot",
                "-kernel",
            ])
            .arg(&self.kernel)
            .arg("-initrd")
            .arg(&self.initramfs)
            .args(["-append", "console=ttyS0 panic=-1 quiet"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("qemu starts");
        let mut stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            let mut out = Vec::new();
            let _ = stdout.read_to_end(&mut out);
            out
        });
        let started = Instant::now();
        loop {
            if child.try_wait().unwrap().is_some() {
                break;
            }
            if started.elapsed() > VM_TIMEOUT {
                let _ = child.kill();
                let _ = child.wait();
                let out = String::from_utf8_lossy(&reader.join().unwrap()).into_owned();
                panic!("the VM ran past {VM_TIMEOUT:?}; its console:\n{out}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let mut err = String::new();
        let _ = child.stderr.take().unwrap().read_to_string(&mut err);
        let out = String::from_utf8_lossy(&reader.join().unwrap()).into_owned();
        eprintln!("ktls_vm: the VM ran {:?}", started.elapsed());
        if !err.is_empty() {
            eprintln!("qemu said: {err}");
        }
        out
    }
}

/// A root holding `boot/vmlinuz-VERSION` and `lib/modules/VERSION` with a
/// `tls` module, and VERSION: the host's, where such a kernel is installed
/// (the newest), else the package `linux-image-amd64` depends on, unpacked
/// into `dir` (`apt-get download` + `dpkg-deb -x`, installing nothing;
/// `PEREGRINE_KTLS_VM_DOWNLOAD=1` takes this way even where one is installed).
fn kernel_files(dir: &Path) -> Option<(PathBuf, String)> {
    let usable = |root: &Path, version: &str| {
        std::fs::File::open(root.join(format!("boot/vmlinuz-{version}"))).is_ok()
            && root.join(format!("lib/modules/{version}/modules.dep")).is_file()
            && root.join(format!("lib/modules/{version}/kernel/net/tls")).is_dir()
    };
    let versions = |root: &Path| -> Vec<String> {
        let mut found: Vec<String> = std::fs::read_dir(root.join("boot"))
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
            .filter_map(|e| e.file_name().to_str()?.strip_prefix("vmlinuz-").map(str::to_owned))
            .filter(|v| usable(root, v))
            .collect();
        found.sort();
        found
    };
    let host = Path::new("/");
    let download = std::env::var_os("PEREGRINE_KTLS_VM_DOWNLOAD").is_some();
    if let Some(version) = versions(host).pop().filter(|_| !download) {
        return Some((host.to_owned(), version));
    }
    // `apt-cache depends linux-image-amd64` names today's image package.
    let depends = Command::new("apt-cache").args(["depends", KERNEL_META]).output().ok()?;
    let package = String::from_utf8_lossy(&depends.stdout)
        .lines()
        .filter_map(|l| l.trim().strip_prefix("Depends: "))
        .find(|p| p.starts_with("linux-image-"))?
        .to_owned();
    let fetched = Command::new("apt-get")
        .args(["download", &package])
        .current_dir(dir)
        .status()
        .is_ok_and(|s| s.success());
    let deb = std::fs::read_dir(dir)
        .ok()?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "deb"))?;
    let root = dir.join("kernel");
    let unpacked = fetched
        && Command::new("dpkg-deb")
            .arg("-x")
            .arg(&deb)
            .arg(&root)
            .status()
            .is_ok_and(|s| s.success());
    let _ = std::fs::remove_file(&deb);
    if !unpacked {
        return None;
    }
    // The package ships no modules.dep (its postinst runs depmod): make it.
    for entry in std::fs::read_dir(root.join("lib/modules")).ok()?.filter_map(Result::ok) {
        let version = entry.file_name().to_string_lossy().into_owned();
        let _ = Command::new("depmod").arg("-b").arg(&root).arg(&version).status();
    }
    let version = versions(&root).pop()?;
    Some((root, version))
}

/// The module files (paths under `modules`) to load for `wanted`, each
/// after its dependencies, each once; from modules.dep (`path: dep dep`).
fn module_order(modules: &Path, wanted: &[&str]) -> Result<Vec<String>, String> {
    let dep = std::fs::read_to_string(modules.join("modules.dep")).map_err(|e| format!("modules.dep: {e}"))?;
    let deps: Vec<(&str, Vec<&str>)> = dep
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(m, d)| (m, d.split_whitespace().collect()))
        .collect();
    // Module names use - and _ alike.
    let name_of = |path: &str| {
        let file = path.rsplit('/').next().unwrap_or(path);
        file.split(".ko").next().unwrap_or(file).replace('-', "_")
    };
    fn visit(path: &str, deps: &[(&str, Vec<&str>)], order: &mut Vec<String>) {
        if order.iter().any(|p| p == path) {
            return;
        }
        if let Some((_, ds)) = deps.iter().find(|(m, _)| *m == path) {
            // modules.dep lists a module's dependencies deepest last.
            for d in ds.iter().rev() {
                visit(d, deps, order);
            }
        }
        order.push(path.to_owned());
    }
    let mut order = Vec::new();
    for want in wanted {
        let want = want.replace('-', "_");
        let Some((path, _)) = deps.iter().find(|(m, _)| name_of(m) == want) else {
            return Err(format!("the kernel has no module {want}"));
        };
        visit(path, &deps, &mut order);
    }
    if order.iter().any(|p| !p.ends_with(".ko")) {
        return Err("the kernel's modules are compressed; busybox's insmod takes plain .ko files".into());
    }
    Ok(order)
}

/// An initramfs (newc cpio, uncompressed: the kernel takes it as it is)
/// with busybox, the modules, this test binary and its libraries, and an
/// /init that loads the modules, runs the cases and powers off.
fn make_initramfs(out: &Path, busybox: &Path, modules: &Path, order: &[String]) -> Result<(), String> {
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut cpio = Cpio::default();
    for d in [
        "bin", "sbin", "proc", "sys", "tmp", "dev", "mods", "lib", "lib64", "usr", "usr/lib", "usr/bin", "usr/sbin",
    ] {
        cpio.dir(d);
    }
    cpio.file(
        "bin/busybox",
        &std::fs::read(busybox).map_err(|e| e.to_string())?,
        0o755,
    );
    cpio.file("t", &std::fs::read(&me).map_err(|e| e.to_string())?, 0o755);
    for lib in libraries(&me)? {
        let rel = lib.strip_prefix("/").unwrap().to_string_lossy().into_owned();
        let mut at = String::new();
        for part in rel.split('/').collect::<Vec<_>>().split_last().unwrap().1 {
            at = if at.is_empty() {
                part.to_string()
            } else {
                format!("{at}/{part}")
            };
            cpio.dir(&at);
        }
        cpio.file(
            &rel,
            &std::fs::read(&lib).map_err(|e| format!("{}: {e}", lib.display()))?,
            0o755,
        );
    }
    let mut insmods = String::new();
    for (i, m) in order.iter().enumerate() {
        let bytes = std::fs::read(modules.join(m)).map_err(|e| format!("{m}: {e}"))?;
        cpio.file(&format!("mods/{i}.ko"), &bytes, 0o644);
        insmods.push_str(&format!("insmod /mods/{i}.ko || echo 'insmod {m} failed'\n"));
    }
    let filter = "ktls_serves_files_and_ends_on_key_update_in_a_vm";
    let init = format!(
        "#!/bin/busybox sh\n/bin/busybox --install -s\nmount -t proc proc /proc\nmount -t sysfs sys /sys\n\
         mount -t tmpfs tmp /tmp\nmount -t devtmpfs dev /dev\nip link set lo up\n{insmods}\
         echo \"ulps: $(cat /proc/sys/net/ipv4/tcp_available_ulp)\"\n\
         cd /tmp && {INSIDE_VAR}=1 TMPDIR=/tmp /t --exact {filter} --nocapture --test-threads=1 2>&1\n\
         echo \"KTLS-VM: exit $?\"\npoweroff -f\n"
    );
    cpio.file("init", init.as_bytes(), 0o755);
    std::fs::write(out, cpio.finish()).map_err(|e| e.to_string())
}

/// The shared libraries `binary` loads, as `ldd` lists them (the VM runs
/// the host's userland's).
fn libraries(binary: &Path) -> Result<Vec<PathBuf>, String> {
    let out = Command::new("ldd")
        .arg(binary)
        .output()
        .map_err(|e| format!("ldd: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(text
        .split_whitespace()
        .filter(|w| w.starts_with('/'))
        .map(PathBuf::from)
        .filter(|p| p.is_file())
        .collect())
}

/// A cpio archive in the "newc" format the kernel unpacks
/// (Documentation/driver-api/early-userspace/buffer-format.rst).
#[derive(Default)]
struct Cpio {
    bytes: Vec<u8>,
    ino: u32,
    dirs: Vec<String>,
}

impl Cpio {
    fn entry(&mut self, name: &str, mode: u32, data: &[u8]) {
        self.ino += 1;
        let header = format!(
            "070701{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}",
            self.ino,
            mode,
            0,
            0,
            1,
            0,
            data.len(),
            0,
            0,
            0,
            0,
            name.len() + 1,
            0
        );
        self.bytes.extend_from_slice(header.as_bytes());
        self.bytes.extend_from_slice(name.as_bytes());
        self.bytes.push(0);
        self.pad();
        self.bytes.extend_from_slice(data);
        self.pad();
    }

    fn pad(&mut self) {
        while self.bytes.len() % 4 != 0 {
            self.bytes.push(0);
        }
    }

    fn dir(&mut self, name: &str) {
        if !self.dirs.iter().any(|d| d == name) {
            self.dirs.push(name.to_owned());
            self.entry(name, 0o040_755, &[]);
        }
    }

    fn file(&mut self, name: &str, data: &[u8], perm: u32) {
        self.entry(name, 0o100_000 | perm, data);
    }

    fn finish(mut self) -> Vec<u8> {
        self.entry("TRAILER!!!", 0, &[]);
        self.bytes
    }
}
