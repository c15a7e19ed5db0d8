//! One TLS connection's record layer, between the socket and the
//! connection's plaintext buffers (`conn.rs`). Reads: records from the
//! socket into rustls, decrypted bytes out into the read buffer. Writes:
//! plaintext into rustls while its outgoing buffer has room
//! (`TLS_SEND_BYTES_MAX`), records out to the socket with one `writev`.
//!
//! Everything a client can send (garbage, plaintext HTTP, a record cut
//! short, a failed handshake) ends as an error for this connection alone,
//! logged at debug level (`--log-level debug` or `PEREGRINE_DEBUG=1`).

use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::sync::Arc;

use crate::sys::stream::Stream;
use rustls::ServerConnection;

use super::TlsListener;
use crate::limits::TLS_SEND_BYTES_MAX;

pub(crate) struct TlsSession {
    /// Records in user space by rustls, or in the kernel (`ktls.rs`).
    records: Records,
    pub(crate) listener: Arc<TlsListener>,
    /// A fatal alert or our close_notify is queued: nothing more is
    /// encrypted or read.
    done: bool,
    /// The client's first byte has been seen (and was not plain HTTP).
    started: bool,
    /// The handshake was refused for the name the client asked for: this
    /// alert goes instead of rustls' (which says `access_denied`).
    alert: Option<&'static [u8]>,
    /// That alert is sent: nothing more is.
    refused: bool,
    /// Once the handshake is done: the name the client asked for (SNI),
    /// in normal form, if it gave one that is a name.
    server_name: Option<Option<Box<str>>>,
    /// The last socket read of the current `read` call was short: the
    /// socket is drained, and under edge-triggered epoll new bytes raise a
    /// new event, so reading again would only say EAGAIN.
    short_read: bool,
    /// Our close_notify is queued (it goes once).
    notified: bool,
    /// The kernel cannot take this connection's version or cipher (known
    /// at its first large file, counted then).
    ktls_refused: bool,
    /// Where the bytes read from the socket stand between records: the
    /// keys go to the kernel only at a record's edge.
    edge: super::ktls::RecordEdge,
}

/// Who makes and reads the connection's records.
// The session is boxed whole (`Transport::Tls`): boxing rustls' state here
// too would be one more allocation per connection for nothing.
#[allow(clippy::large_enum_variant)]
enum Records {
    User(ServerConnection),
    /// The kernel (kTLS), since the keys were handed over; what the
    /// access log and metrics ask of the session is kept from before.
    Kernel {
        facts: crate::access_log::TlsFacts,
        resumed: bool,
    },
}

/// The socket as rustls reads it, noting the first byte of what it reads
/// (the connection's first byte tells TLS from plain HTTP, with no extra
/// system call).
struct FirstByte<'s> {
    stream: &'s mut Stream,
    edge: &'s mut super::ktls::RecordEdge,
    first: Option<u8>,
    /// The read returned fewer bytes than rustls had room for.
    short: bool,
}

impl Read for FirstByte<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.stream.read(buf)?;
        self.edge.feed(&buf[..n]);
        if n > 0 && self.first.is_none() {
            self.first = Some(buf[0]);
        }
        self.short = n > 0 && n < buf.len();
        Ok(n)
    }
}

/// The error `TlsSession::read` returns when the client speaks plain HTTP.
#[derive(Debug)]
pub(crate) struct PlainHttp;

impl std::fmt::Display for PlainHttp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("plain HTTP sent to the TLS port")
    }
}

impl std::error::Error for PlainHttp {}

impl PlainHttp {
    /// Whether `e` says the client sent plain HTTP.
    pub(crate) fn is(e: &io::Error) -> bool {
        e.get_ref().is_some_and(|inner| inner.is::<PlainHttp>())
    }

    /// The answer it gets, in plaintext, before the connection closes.
    pub(crate) const ANSWER: &'static [u8] = b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 50\r\nConnection: close\r\n\r\nThis port speaks HTTPS: use https:// to reach it.\n";
}

impl TlsSession {
    pub(crate) fn new(listener: &Arc<TlsListener>) -> Option<Self> {
        let mut conn = ServerConnection::new(listener.config.clone()).ok()?;
        conn.set_buffer_limit(Some(TLS_SEND_BYTES_MAX));
        Some(TlsSession {
            records: Records::User(conn),
            listener: listener.clone(),
            done: false,
            started: false,
            alert: None,
            refused: false,
            server_name: None,
            short_read: false,
            notified: false,
            ktls_refused: false,
            edge: super::ktls::RecordEdge::default(),
        })
    }

    /// Reads plaintext, as a socket read would: `Ok(0)` is the end (the
    /// client's close_notify, or a TCP close without one), `WouldBlock`
    /// means the socket is drained. A TLS failure is `InvalidData`; its
    /// alert, if any, is queued for [`TlsSession::write_tls`].
    ///
    /// `closing_hinted`: epoll said the client closed its side (RDHUP);
    /// then the socket is read to its end, never left after a short read
    /// (no new event would come for the FIN already seen).
    pub(crate) fn read(
        &mut self,
        stream: &mut Stream,
        buf: &mut [u8],
        peer: SocketAddr,
        closing_hinted: bool,
    ) -> io::Result<usize> {
        if self.done {
            return Ok(0);
        }
        self.short_read = false;
        let may_stop_short = !closing_hinted;
        let conn = match &mut self.records {
            Records::User(conn) => conn,
            Records::Kernel { .. } => return self.read_kernel(stream, buf, peer),
        };
        loop {
            match conn.reader().read(buf) {
                Ok(n) => return Ok(n),
                // The records read so far held no plaintext (a handshake
                // flight) and the socket is drained: as the plain path
                // does, skip the read that would only say EAGAIN.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && self.short_read => return Err(e),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                    // Most clients close without close_notify; HTTP's
                    // own framing tells whether a message was complete.
                    debug(
                        peer,
                        if conn.is_handshaking() {
                            "closed during the handshake"
                        } else {
                            "closed without close_notify (maybe mid-record)"
                        },
                    );
                    return Ok(0);
                }
                Err(e) => return Err(e),
            }
            // rustls holds no plaintext: read records from the socket.
            let mut reader = FirstByte {
                stream: &mut *stream,
                edge: &mut self.edge,
                first: None,
                short: false,
            };
            let read = conn.read_tls(&mut reader);
            self.short_read = reader.short && may_stop_short;
            if !self.started {
                // A TLS connection starts with a handshake record (0x16);
                // an uppercase letter is an HTTP method: plain HTTP sent
                // to this port, which gets a plain answer (as nginx does).
                match reader.first {
                    Some(b) if b.is_ascii_uppercase() => {
                        debug(peer, "plain HTTP sent to the TLS port");
                        self.done = true;
                        return Err(io::Error::other(PlainHttp));
                    }
                    Some(_) => self.started = true,
                    None => {}
                }
            }
            match read {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Err(e),
                Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                    // rustls refuses to buffer more (a handshake message
                    // over 64 KiB): the client is misbehaving.
                    debug(peer, &e.to_string());
                    self.done = true;
                    return Err(e);
                }
                Err(e) => return Err(e),
            }
            if let Err(e) = conn.process_new_packets() {
                if super::store::take_refused_name() {
                    debug(peer, "handshake refused: no site is served under the name it asked for");
                    self.alert = Some(UNRECOGNIZED_NAME);
                    self.done = true;
                    return Err(io::Error::new(io::ErrorKind::InvalidData, e));
                }
                let what = if conn.is_handshaking() {
                    format!("handshake failed: {e}")
                } else {
                    format!("TLS error: {e}")
                };
                debug(peer, &what);
                self.done = true;
                return Err(io::Error::new(io::ErrorKind::InvalidData, e));
            }
            if self.server_name.is_none() && !conn.is_handshaking() {
                // Once per connection, before its first request.
                let mut buf = crate::host::HostBuf::new();
                let name = (conn.server_name())
                    .and_then(|n| crate::host::normalize_name(n.as_bytes(), &mut buf).ok())
                    .map(|n| Box::from(n.as_str()));
                self.server_name = Some(name);
            }
        }
    }

    /// Reads over kernel TLS: application data as from a socket; any other
    /// record (the client's close_notify, a KeyUpdate, another alert or
    /// handshake message) ends the connection, counted, as `Ok(0)`. The
    /// socket is read until EAGAIN, never left after a short read: the
    /// kernel stops a read short before a record of another type, which
    /// raises no new event.
    fn read_kernel(&mut self, stream: &mut Stream, buf: &mut [u8], peer: SocketAddr) -> io::Result<usize> {
        use super::ktls::{count, Event};
        use crate::sys::ktls::{recv_record, RECORD_ALERT, RECORD_APPLICATION_DATA, RECORD_HANDSHAKE};
        loop {
            let (kind, n) = match recv_record(&*stream, buf) {
                Ok(read) => read,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    if e.kind() != io::ErrorKind::WouldBlock {
                        // EBADMSG: a record that does not decrypt.
                        debug(peer, &format!("kTLS read failed: {e}"));
                    }
                    return Err(e);
                }
            };
            let event = match kind {
                RECORD_APPLICATION_DATA => return Ok(n),
                // RFC 8446 §6.1: level warning (1), close_notify (0).
                RECORD_ALERT if buf[..n] == [1, 0] => Event::PeerCloseNotify,
                // §4.6.3: KeyUpdate is handshake message 24. The kernel
                // cannot take new keys: the connection ends here.
                RECORD_HANDSHAKE if n > 0 && buf[0] == 24 => Event::PeerKeyUpdate,
                _ => Event::PeerOther,
            };
            debug(
                peer,
                &format!("kTLS: the client sent a record of type {kind}: {}", event.label()),
            );
            count(event);
            self.done = true;
            return Ok(0);
        }
    }

    /// The records are the kernel's (kTLS): the connection is written as
    /// a plain socket.
    #[inline]
    pub(crate) fn is_kernel(&self) -> bool {
        matches!(self.records, Records::Kernel { .. })
    }

    /// Hands the records to the kernel if this connection may (kTLS
    /// allowed on its listener, TLS 1.3 with a cipher the kernel takes)
    /// and rustls holds nothing of it: no record to send, no plaintext or
    /// part of a record received.
    pub(crate) fn give_to_kernel(&mut self, stream: &Stream, peer: SocketAddr) -> super::ktls::Handover {
        use super::ktls::{count, Event, Handover};
        let Records::User(conn) = &mut self.records else {
            return Handover::Done;
        };
        if !self.listener.ktls
            || self.ktls_refused
            || self.done
            || self.notified
            || self.alert.is_some()
            || conn.is_handshaking()
        {
            return Handover::No;
        }
        let suite = conn.negotiated_cipher_suite().map(|s| s.suite());
        let cipher = match (conn.protocol_version(), suite) {
            (Some(rustls::ProtocolVersion::TLSv1_3), Some(suite)) => super::ktls::cipher_for(suite),
            _ => None,
        };
        let Some(cipher) = cipher else {
            self.ktls_refused = true;
            count(Event::Fallback);
            return Handover::No;
        };
        // The session tickets rustls sends after the handshake, or the
        // records of the answers before: out first.
        if conn.wants_write() {
            return Handover::AfterSending;
        }
        if !self.edge.at_edge() {
            debug(peer, "kTLS: not for this file: part of a record read (rustls keeps it)");
            return Handover::No;
        }
        // Complete records read but not yet decrypted are decrypted now;
        // after this, plaintext waiting means a request already read.
        match conn.process_new_packets() {
            Ok(state) if state.plaintext_bytes_to_read() == 0 && !state.peer_has_closed() => {}
            _ => return Handover::No,
        }
        if conn.wants_write() {
            return Handover::AfterSending;
        }
        let facts = self.facts();
        let resumed = self.is_resumed();
        let Records::User(conn) = std::mem::replace(&mut self.records, Records::Kernel { facts, resumed }) else {
            unreachable!("checked above");
        };
        let installed = conn
            .dangerous_extract_secrets()
            .map_err(|e| io::Error::other(e.to_string()))
            .and_then(|secrets| {
                let info = |(seq, secrets): (u64, rustls::ConnectionTrafficSecrets)| {
                    let (key, iv) = match &secrets {
                        rustls::ConnectionTrafficSecrets::Aes128Gcm { key, iv }
                        | rustls::ConnectionTrafficSecrets::Aes256Gcm { key, iv }
                        | rustls::ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => (key.as_ref(), iv.as_ref()),
                        _ => return None,
                    };
                    crate::sys::ktls::CryptoInfo::tls13(cipher, key, iv, seq)
                };
                let bad = || io::Error::other("keys of an unexpected shape");
                let tx = info(secrets.tx).ok_or_else(bad)?;
                let rx = info(secrets.rx).ok_or_else(bad)?;
                crate::sys::ktls::install(stream, &tx, &rx)
            });
        match installed {
            Ok(()) => {
                count(Event::Enabled);
                debug(peer, "kTLS: the records are the kernel's from here");
                Handover::Done
            }
            Err(e) => {
                // Nothing can be sent on it any more: not even an alert
                // (the socket may have no keys to make one with).
                count(Event::Failed);
                crate::log::warn(format_args!(
                    "tls {peer}: kTLS refused the keys: {e}; the connection closes"
                ));
                self.done = true;
                self.notified = true;
                Handover::Failed
            }
        }
    }

    /// What requests on this connection know of it: `Some`, with the name
    /// the client asked for (SNI) in normal form if it gave one.
    #[inline]
    pub(crate) fn request_tls(&self) -> Option<Option<&str>> {
        Some(self.server_name.as_ref().and_then(|n| n.as_deref()))
    }

    /// The socket read behind the plaintext `read` just returned was short
    /// and rustls holds no more plaintext than the caller's buffer took
    /// (the caller checks that its buffer was not filled): the socket is
    /// drained until the next readiness event.
    #[inline]
    pub(crate) fn drained(&self) -> bool {
        self.short_read
    }

    /// Whether the handshake resumed a session (for the metrics).
    pub(crate) fn is_resumed(&self) -> bool {
        match &self.records {
            Records::User(conn) => conn.handshake_kind() == Some(rustls::HandshakeKind::Resumed),
            Records::Kernel { resumed, .. } => *resumed,
        }
    }

    /// The protocol version and whether the session was resumed, for
    /// the access log.
    #[inline]
    pub(crate) fn facts(&self) -> crate::access_log::TlsFacts {
        let conn = match &self.records {
            Records::User(conn) => conn,
            Records::Kernel { facts, .. } => return *facts,
        };
        crate::access_log::TlsFacts {
            version: match conn.protocol_version() {
                Some(rustls::ProtocolVersion::TLSv1_3) => Some(crate::access_log::TlsVersion::Tls13),
                Some(rustls::ProtocolVersion::TLSv1_2) => Some(crate::access_log::TlsVersion::Tls12),
                _ => None,
            },
            resumed: (conn.handshake_kind()).map(|k| k == rustls::HandshakeKind::Resumed),
        }
    }

    /// Encrypts as much of `plain` as the outgoing buffer has room for;
    /// returns how much. 0 means: send first.
    pub(crate) fn encrypt(&mut self, plain: &[u8]) -> usize {
        match &mut self.records {
            Records::User(conn) if !self.done => conn.writer().write(plain).unwrap_or(0),
            _ => 0,
        }
    }

    /// As [`TlsSession::encrypt`], for pieces that go in the same
    /// records (a head and its body's first bytes).
    pub(crate) fn encrypt_vectored(&mut self, plain: &[io::IoSlice<'_>]) -> usize {
        match &mut self.records {
            Records::User(conn) if !self.done => conn.writer().write_vectored(plain).unwrap_or(0),
            _ => 0,
        }
    }

    /// Writes queued records to the socket (vectored, one call).
    pub(crate) fn write_tls(&mut self, stream: &mut Stream) -> io::Result<usize> {
        if let Some(alert) = self.alert.take() {
            // Best effort, as any alert: the connection closes next. The
            // one rustls queued is never sent.
            self.refused = true;
            return stream.write(alert);
        }
        match &mut self.records {
            Records::User(conn) if !self.refused => conn.write_tls(stream),
            _ => Ok(0),
        }
    }

    /// Records are waiting to be written.
    pub(crate) fn wants_write(&self) -> bool {
        self.alert.is_some() || (!self.refused && matches!(&self.records, Records::User(c) if c.wants_write()))
    }

    /// The handshake has not completed yet.
    pub(crate) fn is_handshaking(&self) -> bool {
        matches!(&self.records, Records::User(c) if c.is_handshaking())
    }

    /// The client and we agreed on HTTP/2 by ALPN.
    pub(crate) fn alpn_h2(&self) -> bool {
        matches!(&self.records, Records::User(c) if c.alpn_protocol() == Some(b"h2"))
    }

    /// Queues close_notify behind the records already queued (once, and
    /// only after a handshake), so that the last answer and the alert
    /// leave in one write; nothing is encrypted after it.
    pub(crate) fn notify_close(&mut self) {
        match &mut self.records {
            Records::User(conn) if !self.done && !self.notified && !conn.is_handshaking() => {
                conn.send_close_notify();
                self.notified = true;
                self.done = true;
            }
            _ => {}
        }
    }

    /// Queues close_notify (unless [`TlsSession::notify_close`] did) and
    /// writes what is queued, best effort: the connection is closing
    /// either way.
    pub(crate) fn close(&mut self, stream: &mut Stream) {
        if let Records::Kernel { .. } = self.records {
            // An alert record of the kernel's: close_notify (RFC 8446
            // §6.1: level warning, description 0), once.
            if !self.notified {
                self.notified = true;
                self.done = true;
                let _ = crate::sys::ktls::send_record(&*stream, crate::sys::ktls::RECORD_ALERT, &[1, 0]);
            }
            return;
        }
        self.notify_close();
        self.done = true;
        let _ = self.write_tls(stream);
    }
}

/// A fatal `unrecognized_name` alert (RFC 6066 §3: 112) in a plaintext
/// record, as sent before any key is agreed (TLS 1.2 and 1.3 alike).
const UNRECOGNIZED_NAME: &[u8] = &[0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 112];

/// One debug line (`--log-level debug`, or `PEREGRINE_DEBUG=1`).
pub(crate) fn debug(peer: SocketAddr, what: &str) {
    crate::log::debug(format_args!("tls {peer}: {what}"));
}
