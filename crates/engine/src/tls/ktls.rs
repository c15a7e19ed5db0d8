//! Kernel TLS: when an HTTP/1.1 connection over TLS 1.3 is about to send a
//! file body of [`BODY_BYTES_MIN`] or more, its record keys go to the
//! kernel (`sys/ktls.rs`) and `sendfile` carries the file, encrypted in
//! the kernel, instead of `pread` + rustls + `writev` (two copies of every
//! byte through user space). From then on the connection is a plain
//! socket to the driver, but for two things `session.rs` does: a record
//! that is not application data (the client's close_notify, a KeyUpdate,
//! any other handshake message) ends the connection, counted; and the
//! close_notify we send goes as an alert record by `sendmsg`.
//!
//! Secret extraction consumes rustls' connection, so nothing may be
//! tried that could fail after it: whether the kernel has kTLS, and for
//! which ciphers, is probed once per process ([`support`]) before any
//! listener enables extraction; the switch happens only when rustls holds
//! nothing of the connection's (no record to send, no plaintext or partial
//! record received). A KeyUpdate cannot be answered once the keys are the
//! kernel's (Linux 6.1 has no rekeying; 6.13's is not used here), so it
//! ends the connection cleanly: our close_notify, then the FIN.
//!
//! HTTP/2 connections never switch: their files go out as DATA frames
//! among other streams' frames, which sendfile cannot interleave. TLS 1.2
//! connections do not either: the kernel counts the explicit nonce up
//! from its start while rustls XORs it with the sequence number, so the
//! two could repeat a nonce under one key.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use crate::sys::ktls::Cipher;

/// The smallest file body (what is left of it) handed to the kernel: below
/// it, the setsockopts cost more than the two copies saved, and the
/// issue's rule puts the line at 64 KiB, rustls' own record buffer
/// (`TLS_SEND_BYTES_MAX`).
pub const BODY_BYTES_MIN: u64 = 64 * 1024;

/// Whether file bodies may go through kernel TLS (the `ktls` setting).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum KernelTls {
    /// Never: rustls encrypts every byte in user space.
    Off,
    /// Where the kernel has it (the default).
    #[default]
    Auto,
}

impl std::str::FromStr for KernelTls {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "off" => Ok(KernelTls::Off),
            "auto" => Ok(KernelTls::Auto),
            _ => Err(format!("ktls must be \"off\" or \"auto\", not {s:?}")),
        }
    }
}

/// What the process's probe found: the ciphers the kernel takes, or why
/// there are none.
type Probed = Result<Vec<Cipher>, String>;

fn probed() -> &'static Probed {
    static PROBED: OnceLock<Probed> = OnceLock::new();
    PROBED.get_or_init(|| match crate::sys::ktls::probe() {
        Ok(ciphers) if ciphers.is_empty() => Err("the tls module takes none of TLS 1.3's ciphers".into()),
        Ok(ciphers) => Ok(ciphers),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Err("this kernel has no tls module".into()),
        Err(e) => Err(format!("the tls module cannot be used: {e}")),
    })
}

/// The ciphers kernel TLS takes here, or None where it cannot be used
/// (probed once per process, on the first call).
pub(crate) fn support() -> Option<&'static [Cipher]> {
    probed().as_ref().ok().map(|c| c.as_slice())
}

/// What the start line says of kernel TLS with `mode`, e.g. "kTLS: on (tls
/// module present: AES-128-GCM, AES-256-GCM, ChaCha20-Poly1305)" or "kTLS:
/// off (this kernel has no tls module: files over TLS are encrypted in
/// user space)".
pub fn status(mode: KernelTls) -> String {
    if mode == KernelTls::Off {
        return "kTLS: off (ktls = \"off\": files over TLS are encrypted in user space)".into();
    }
    match probed() {
        Ok(ciphers) => {
            let names: Vec<&str> = ciphers
                .iter()
                .map(|c| match c {
                    Cipher::Aes128Gcm => "AES-128-GCM",
                    Cipher::Aes256Gcm => "AES-256-GCM",
                    Cipher::Chacha20Poly1305 => "ChaCha20-Poly1305",
                })
                .collect();
            format!(
                "kTLS: on (tls module present: {}; TLS 1.3 HTTP/1.1 file bodies of 64 KiB and more)",
                names.join(", ")
            )
        }
        Err(why) => format!("kTLS: off ({why}: files over TLS are encrypted in user space)"),
    }
}

/// The kernel cipher for rustls' negotiated TLS 1.3 suite, if the kernel
/// takes it.
pub(crate) fn cipher_for(suite: rustls::CipherSuite) -> Option<Cipher> {
    let cipher = match suite {
        rustls::CipherSuite::TLS13_AES_128_GCM_SHA256 => Cipher::Aes128Gcm,
        rustls::CipherSuite::TLS13_AES_256_GCM_SHA384 => Cipher::Aes256Gcm,
        rustls::CipherSuite::TLS13_CHACHA20_POLY1305_SHA256 => Cipher::Chacha20Poly1305,
        _ => return None,
    };
    support()?.contains(&cipher).then_some(cipher)
}

/// What `TlsSession::give_to_kernel` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Handover {
    /// The records are the kernel's (now or before): write as to TCP.
    Done,
    /// rustls has records to send first: send them, encrypting nothing
    /// more, and ask again.
    AfterSending,
    /// Not for this body: rustls encrypts it (kTLS is off, the version or
    /// cipher is not one the kernel takes, or rustls holds received bytes).
    No,
    /// The keys were taken but the kernel refused them: the connection
    /// must close.
    Failed,
}

/// What happened on kTLS connections (`peregrine_tls_ktls_total{event}`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Event {
    /// The keys went to the kernel.
    Enabled,
    /// A connection sent a large file but could not switch: its version
    /// (TLS 1.2) or cipher is not one the kernel takes here (counted once
    /// per connection).
    Fallback,
    /// The keys were taken from rustls but the kernel refused them: the
    /// connection closed (not expected once the probe passed).
    Failed,
    /// The client sent KeyUpdate: the connection ended, cleanly.
    PeerKeyUpdate,
    /// The client sent close_notify.
    PeerCloseNotify,
    /// Another alert or handshake message from the client ended it.
    PeerOther,
}

impl Event {
    pub(crate) const ALL: [Event; 6] = [
        Event::Enabled,
        Event::Fallback,
        Event::Failed,
        Event::PeerKeyUpdate,
        Event::PeerCloseNotify,
        Event::PeerOther,
    ];

    pub(crate) fn label(self) -> &'static str {
        match self {
            Event::Enabled => "enabled",
            Event::Fallback => "fallback",
            Event::Failed => "failed",
            Event::PeerKeyUpdate => "peer_keyupdate",
            Event::PeerCloseNotify => "peer_close_notify",
            Event::PeerOther => "peer_other",
        }
    }
}

/// The counts, per process: these events happen at most once per
/// connection, so one shared atomic add costs nothing that matters, and
/// the session that sees them needs no path to its worker's counters.
static EVENTS: [AtomicU64; 6] = [const { AtomicU64::new(0) }; 6];

pub(crate) fn count(event: Event) {
    EVENTS[event as usize].fetch_add(1, Ordering::Relaxed);
}

/// How many times `event` happened in this process.
pub(crate) fn counted(event: Event) -> u64 {
    EVENTS[event as usize].load(Ordering::Relaxed)
}

/// Follows TLS record boundaries in the bytes read from the socket, to
/// know that rustls holds no part of a record when the keys are taken
/// (what rustls has read but not yet decrypted would be lost: the kernel
/// starts at the socket's next byte). Only the 5-byte headers are looked
/// at (RFC 8446 §5.1: type, version, length).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RecordEdge {
    /// Header bytes seen of the record being read (0 to 5).
    header_seen: u8,
    /// The length field's bytes, as they come.
    length: [u8; 2],
    /// Body bytes of the current record not yet seen.
    body_left: usize,
}

impl RecordEdge {
    /// Notes `bytes`, the next ones read from the socket.
    pub(crate) fn feed(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            if self.body_left > 0 {
                let n = self.body_left.min(bytes.len());
                self.body_left -= n;
                bytes = &bytes[n..];
                continue;
            }
            // In a header: bytes 3 and 4 are the length.
            match self.header_seen {
                3 => self.length[0] = bytes[0],
                4 => self.length[1] = bytes[0],
                _ => {}
            }
            self.header_seen += 1;
            bytes = &bytes[1..];
            if self.header_seen == 5 {
                self.header_seen = 0;
                self.body_left = usize::from(u16::from_be_bytes(self.length));
            }
        }
    }

    /// Every byte read so far belongs to a whole record.
    pub(crate) fn at_edge(&self) -> bool {
        self.header_seen == 0 && self.body_left == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_edge_follows_headers_and_bodies_across_reads() {
        let mut edge = RecordEdge::default();
        assert!(edge.at_edge());
        // A record of 3 bytes, then one of 256, read in odd pieces.
        let bytes = [&[23u8, 3, 3, 0, 3, 1, 2, 3][..], &[23, 3, 3, 1, 0], &[0; 256]].concat();
        for cut in 0..bytes.len() {
            let mut edge = RecordEdge::default();
            edge.feed(&bytes[..cut]);
            let whole = cut == 0 || cut == 8 || cut == bytes.len();
            assert_eq!(edge.at_edge(), whole, "cut at {cut}");
            edge.feed(&bytes[cut..]);
            assert!(edge.at_edge());
        }
        edge.feed(&bytes[..6]);
        assert!(!edge.at_edge(), "mid-body");
    }

    #[test]
    fn kernel_tls_setting_is_off_or_auto() {
        assert_eq!("off".parse::<KernelTls>(), Ok(KernelTls::Off));
        assert_eq!("auto".parse::<KernelTls>(), Ok(KernelTls::Auto));
        assert!("on".parse::<KernelTls>().is_err());
    }

    #[test]
    fn status_says_why_it_is_off() {
        assert!(status(KernelTls::Off).starts_with("kTLS: off (ktls = \"off\""));
        let auto = status(KernelTls::Auto);
        match support() {
            Some(_) => assert!(auto.starts_with("kTLS: on (tls module present"), "{auto}"),
            None => assert!(
                auto.starts_with("kTLS: off (") && auto.contains("encrypted in user space"),
                "{auto}"
            ),
        }
    }
}
