//! What every example shares: where to listen. `--bind ADDR` (repeatable;
//! `IP:PORT`, `[IPv6]:PORT`, `HOST:PORT`, or `:PORT` for every IPv4
//! interface, as the `peregrine` command takes them), else the
//! `PEREGRINE_BIND` variable, else `127.0.0.1:8080`. With `--tls-cert
//! FILE --tls-key FILE` (PEM) every address speaks HTTPS (HTTP/1.1 and
//! HTTP/2 by ALPN, HTTP/3 beside it).

use peregrine::{Handler, Server};

/// The address an example listens on when nothing says otherwise.
pub const DEFAULT_BIND: &str = "127.0.0.1:8080";

/// Flags some examples take besides `--bind` (each with a value).
const OWN_FLAGS: &[&str] = &[
    "--max-message",
    "--max-fragments",
    "--n-conns-max",
    "--conns-per-ip-max",
    "--tls-cert",
    "--tls-key",
];

/// Flags some examples take without a value.
const OWN_SWITCHES: &[&str] = &["--deflate"];

/// The value of an example's own flag (`--NAME VALUE` or `--NAME=VALUE`).
#[allow(dead_code)]
pub fn value_of(flag: &str) -> Option<String> {
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if arg == flag {
            return args.next();
        }
        if let Some(v) = arg.strip_prefix(flag).and_then(|r| r.strip_prefix('=')) {
            return Some(v.to_owned());
        }
    }
    None
}

/// The addresses asked for, from the arguments or the environment.
pub fn addresses() -> Vec<String> {
    let mut args = std::env::args().skip(1);
    let mut given = Vec::new();
    while let Some(arg) = args.next() {
        if OWN_FLAGS.contains(&arg.as_str()) {
            args.next();
            continue;
        }
        if OWN_FLAGS.iter().any(|f| arg.starts_with(&format!("{f}="))) || OWN_SWITCHES.contains(&arg.as_str()) {
            continue;
        }
        let value = match arg.strip_prefix("--bind=") {
            Some(v) => v.to_owned(),
            None if arg == "--bind" => args.next().unwrap_or_else(|| usage("--bind needs an address")),
            None => usage(&format!("unknown argument {arg:?}")),
        };
        given.push(value);
    }
    if given.is_empty() {
        given.push(std::env::var("PEREGRINE_BIND").unwrap_or_else(|_| DEFAULT_BIND.to_owned()));
    }
    given
        .into_iter()
        .map(|a| match a.strip_prefix(':') {
            Some(port) => format!("0.0.0.0:{port}"),
            None => a,
        })
        .collect()
}

/// Binds `server` to the addresses asked for, starts it with `handler`,
/// prints where it listens, and serves until SIGINT or SIGTERM. An error
/// is printed as a sentence with each cause once (`cannot listen on
/// 127.0.0.1:8080: Address already in use (os error 98)`), and the
/// example exits with 1: returned from `main`, it would be printed with
/// `Debug` (`Error { kind: Bind(..), source: Os { .. } }`).
pub fn run(server: Server, handler: impl Handler) -> Result<(), peregrine::Error> {
    serve(server, handler).unwrap_or_else(|e| {
        let mut line = e.to_string();
        let mut cause = std::error::Error::source(&e);
        while let Some(c) = cause {
            line += &format!(": {c}");
            cause = c.source();
        }
        eprintln!("{line}");
        std::process::exit(1)
    });
    Ok(())
}

fn serve(mut server: Server, handler: impl Handler) -> Result<(), peregrine::Error> {
    let tls = match (value_of("--tls-cert"), value_of("--tls-key")) {
        (Some(cert), Some(key)) => Some(peregrine::TlsConfig::from_pem_files(cert, key)?),
        (None, None) => None,
        _ => usage("--tls-cert and --tls-key go together"),
    };
    for addr in addresses() {
        server = match &tls {
            Some(tls) => server.bind_tls(addr, tls.clone()),
            None => server.bind(addr),
        };
    }
    let scheme = if tls.is_some() { "https" } else { "http" };
    let running = server.start(handler)?;
    let addrs = running.local_addrs().to_vec();
    // Announced once SIGTERM stops it gracefully: a script may send it as
    // soon as it reads this line.
    running.wait_after(|| {
        for addr in addrs {
            println!("listening on {scheme}://{addr}/");
        }
    })
}

pub fn usage(why: &str) -> ! {
    eprintln!(
        "{why}\nusage: [--bind ADDR]... [--tls-cert FILE --tls-key FILE] (or PEREGRINE_BIND=ADDR; default {DEFAULT_BIND})"
    );
    std::process::exit(2)
}
