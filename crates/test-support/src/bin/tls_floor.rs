//! The TLS floor of bench/handshakes (issue 29): what one handshake costs
//! the server's side of rustls on aws-lc-rs, in memory, with no socket,
//! no event loop and no HTTP. Client and server run in one thread and
//! hand each other their bytes through buffers; only the server's calls
//! (`ServerConnection::new`, `read_tls`, `process_new_packets`,
//! `write_tls`) are timed, so the figure is the provider's own work for
//! the same key, group and mode as a bench/handshakes row. Added to
//! `limit`'s cost of accepting, answering and closing a plain connection
//! (`bench/handshakes` measures that too), it is the floor a server's
//! handshake row is compared with.
//!
//! `tls_floor CA.pem CERT.pem KEY.pem GROUP MODE N`: GROUP `mlkem` or
//! `x25519` (what the client offers; the server offers Peregrine's order,
//! X25519MLKEM768, X25519, P-256, P-384), MODE `full` (the client keeps no
//! session) or `resumed` (it offers the ticket of the handshake before);
//! the server sends tickets in both, from rustls' own ticketer. Runs 5 batches of N handshakes
//! and prints the server's µs per handshake: `min=.. median=.. max=..`
//! over the batches (the minimum is the least disturbed by the host).
//!
//! A seventh argument `client-thread` runs the client on a thread of its
//! own, the two sides passing each other's flights over channels, so
//! that `valgrind --tool=callgrind --separate-threads=yes` counts the
//! server's instructions apart (the main thread's): the floor as an
//! instruction count, beside a server's Ir per connection under
//! callgrind. The server does the same calls either way.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::crypto::aws_lc_rs::{default_provider, kx_group, Ticketer};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, HandshakeKind, RootCertStore, ServerConfig, ServerConnection};

const BATCHES: usize = 5;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let threaded = match args.get(7).map(String::as_str) {
        None => false,
        Some("client-thread") => true,
        Some(other) => panic!("{other}: only client-thread may follow N"),
    };
    if args.len() != 7 && !threaded || args.len() > 8 {
        eprintln!("usage: tls_floor CA.pem CERT.pem KEY.pem mlkem|x25519 full|resumed N [client-thread]");
        std::process::exit(2);
    }
    let (ca, cert, key, group, mode) = (&args[1], &args[2], &args[3], &args[4], &args[5]);
    let n: usize = args[6].parse().expect("N");
    let offered = match group.as_str() {
        "mlkem" => kx_group::X25519MLKEM768,
        "x25519" => kx_group::X25519,
        g => panic!("{g}: mlkem or x25519"),
    };
    let resumed = match mode.as_str() {
        "full" => false,
        "resumed" => true,
        m => panic!("{m}: full or resumed"),
    };

    let server_provider = rustls::crypto::CryptoProvider {
        kx_groups: vec![
            kx_group::X25519MLKEM768,
            kx_group::X25519,
            kx_group::SECP256R1,
            kx_group::SECP384R1,
        ],
        ..default_provider()
    };
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .expect("CERT file")
        .map(|c| c.expect("CERT PEM"))
        .collect();
    let key = PrivateKeyDer::from_pem_file(key).expect("KEY file");
    let mut server = ServerConfig::builder_with_provider(Arc::new(server_provider))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .expect("certificate and key");
    server.alpn_protocols = vec![b"http/1.1".to_vec()];
    // Tickets are sent in both modes, as Peregrine and nginx send them:
    // a `full` client just never offers one back.
    server.ticketer = Ticketer::new().expect("ticketer");
    let server = Arc::new(server);

    let client_provider = rustls::crypto::CryptoProvider {
        kx_groups: vec![offered],
        ..default_provider()
    };
    let mut roots = RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca).expect("CA file") {
        roots.add(c.expect("CA PEM")).expect("CA");
    }
    let mut client = ClientConfig::builder_with_provider(Arc::new(client_provider))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    client.alpn_protocols = vec![b"http/1.1".to_vec()];
    if !resumed {
        client.resumption = rustls::client::Resumption::disabled();
    }
    let client = Arc::new(client);
    if threaded {
        return threaded_batches(&client, &server, resumed, n, group, mode);
    }

    // One handshake first, so a resumed batch starts with a ticket.
    let (_, kind) = handshake(&client, &server);
    assert_eq!(kind, HandshakeKind::Full);
    let mut per_batch = Vec::with_capacity(BATCHES);
    for _ in 0..BATCHES {
        let mut spent = Duration::ZERO;
        for _ in 0..n {
            let (t, kind) = handshake(&client, &server);
            assert_eq!(kind == HandshakeKind::Resumed, resumed, "handshake kind {kind:?}");
            spent += t;
        }
        per_batch.push(spent.as_secs_f64() * 1e6 / n as f64);
    }
    per_batch.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!(
        "min={:.1} median={:.1} max={:.1} n={n} batches={BATCHES} group={group} mode={mode}",
        per_batch[0],
        per_batch[BATCHES / 2],
        per_batch[BATCHES - 1]
    );
}

/// One handshake in memory; returns the time the server's side took.
fn handshake(client: &Arc<ClientConfig>, server: &Arc<ServerConfig>) -> (Duration, HandshakeKind) {
    let mut c = ClientConnection::new(client.clone(), ServerName::try_from("localhost").unwrap()).unwrap();
    let t0 = Instant::now();
    let mut s = ServerConnection::new(server.clone()).unwrap();
    let mut spent = t0.elapsed();
    let mut buf = Vec::with_capacity(16 * 1024);
    // Until neither side has bytes to send: the client's Finished and the
    // server's tickets are part of the server's cost too.
    for _ in 0..16 {
        let mut moved = false;
        while c.wants_write() {
            buf.clear();
            c.write_tls(&mut buf).unwrap();
            let t = Instant::now();
            s.read_tls(&mut &buf[..]).unwrap();
            s.process_new_packets().expect("server");
            spent += t.elapsed();
            moved = true;
        }
        loop {
            buf.clear();
            let t = Instant::now();
            let wrote = if s.wants_write() {
                s.write_tls(&mut buf).unwrap()
            } else {
                0
            };
            spent += t.elapsed();
            if wrote == 0 {
                break;
            }
            let mut rd = &buf[..];
            while !rd.is_empty() {
                c.read_tls(&mut rd).unwrap();
                c.process_new_packets().expect("client");
            }
            moved = true;
        }
        if !moved && !c.is_handshaking() && !s.is_handshaking() {
            break;
        }
    }
    assert!(!c.is_handshaking() && !s.is_handshaking(), "handshake did not finish");
    (spent, s.handshake_kind().expect("kind"))
}

/// What the client thread sends the server (`client-thread`).
enum Flight {
    /// A new handshake begins: the server makes a new connection.
    Start,
    /// The client's records (maybe none); the server answers with its own.
    Bytes(Vec<u8>),
    /// The handshake is over on the client's side.
    End,
}

/// The `client-thread` mode: the same batches and the same server calls
/// as `handshake`, the client on a thread of its own.
fn threaded_batches(
    client: &Arc<ClientConfig>,
    server: &Arc<ServerConfig>,
    resumed: bool,
    n: usize,
    group: &str,
    mode: &str,
) {
    use std::sync::mpsc::channel;
    let (to_server, from_client) = channel::<Flight>();
    let (to_client, from_server) = channel::<Vec<u8>>();
    let client = client.clone();
    let total = 1 + BATCHES * n;
    let peer = std::thread::spawn(move || {
        for _ in 0..total {
            let mut c = ClientConnection::new(client.clone(), ServerName::try_from("localhost").unwrap()).unwrap();
            to_server.send(Flight::Start).unwrap();
            for _ in 0..16 {
                let mut out = Vec::new();
                while c.wants_write() {
                    c.write_tls(&mut out).unwrap();
                }
                let sent = !out.is_empty();
                to_server.send(Flight::Bytes(out)).unwrap();
                let back = from_server.recv().unwrap();
                let mut rd = &back[..];
                while !rd.is_empty() {
                    c.read_tls(&mut rd).unwrap();
                    c.process_new_packets().expect("client");
                }
                if !sent && back.is_empty() && !c.is_handshaking() {
                    break;
                }
            }
            assert!(!c.is_handshaking(), "the client's handshake did not finish");
            to_server.send(Flight::End).unwrap();
        }
    });
    let mut kinds = Vec::with_capacity(total);
    let mut per_batch = Vec::with_capacity(BATCHES);
    let mut spent = Duration::ZERO;
    let mut s = None;
    while let Ok(flight) = from_client.recv() {
        match flight {
            Flight::Start => {
                let t = Instant::now();
                s = Some(ServerConnection::new(server.clone()).unwrap());
                spent += t.elapsed();
            }
            Flight::Bytes(bytes) => {
                let s = s.as_mut().expect("a handshake under way");
                let t = Instant::now();
                if !bytes.is_empty() {
                    s.read_tls(&mut &bytes[..]).unwrap();
                    s.process_new_packets().expect("server");
                }
                // As `handshake`'s buffer: room for a whole flight.
                let mut out = Vec::with_capacity(16 * 1024);
                while s.wants_write() {
                    s.write_tls(&mut out).unwrap();
                }
                spent += t.elapsed();
                to_client.send(out).unwrap();
            }
            Flight::End => {
                let s = s.take().expect("a handshake under way");
                assert!(!s.is_handshaking(), "the server's handshake did not finish");
                kinds.push(s.handshake_kind().expect("kind"));
                // The first handshake is the warm-up (it gives a resumed
                // batch its first ticket), not timed in any batch.
                if kinds.len() == 1 {
                    spent = Duration::ZERO;
                } else if (kinds.len() - 1) % n == 0 {
                    per_batch.push(spent.as_secs_f64() * 1e6 / n as f64);
                    spent = Duration::ZERO;
                }
            }
        }
    }
    peer.join().unwrap();
    assert_eq!(kinds[0], HandshakeKind::Full);
    for kind in &kinds[1..] {
        assert_eq!(*kind == HandshakeKind::Resumed, resumed, "handshake kind {kind:?}");
    }
    per_batch.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!(
        "min={:.1} median={:.1} max={:.1} n={n} batches={BATCHES} group={group} mode={mode} client-thread",
        per_batch[0],
        per_batch[BATCHES / 2],
        per_batch[BATCHES - 1]
    );
}
