//! Kernel TLS (Linux's `tls` upper-layer protocol, `Documentation/networking/tls.rst`):
//! the system calls that hand a connection's record keys to the kernel
//! (`setsockopt(TCP_ULP, "tls")`, then `SOL_TLS`/`TLS_TX` and `TLS_RX`),
//! read one record's type (`recvmsg` with a `TLS_GET_RECORD_TYPE`
//! control message) and send an alert (`sendmsg` with
//! `TLS_SET_RECORD_TYPE`). What to hand over, and when, is `tls/ktls.rs`'s.
//!
//! Contract: once [`install`] succeeded the socket reads and writes
//! plaintext with `read`, `writev`, `sendfile`; a record that is not
//! application data is never read as data: `read` says EIO, and
//! [`recv_record`] returns it with its type.
//!
//! Linux only; elsewhere [`probe`] says "no" and nothing else is called.

use std::io;
#[cfg(target_os = "linux")]
use std::os::fd::{AsRawFd, RawFd};

/// The record keys for one direction, as the kernel's
/// `struct tls12_crypto_info_*` lays them out (`include/uapi/linux/tls.h`):
/// version and cipher (u16 each, native order), then the explicit IV, the
/// key, the salt (the implicit IV) and the record sequence number, each a
/// byte array, so the struct has no padding and these bytes are it.
pub(crate) struct CryptoInfo {
    bytes: Vec<u8>,
}

/// The ciphers the kernel takes, with their `TLS_CIPHER_*` numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Cipher {
    Aes128Gcm,
    Aes256Gcm,
    Chacha20Poly1305,
}

impl Cipher {
    // The probe that walks them is Linux's; elsewhere kTLS is never on.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    pub(crate) const ALL: [Cipher; 3] = [Cipher::Aes128Gcm, Cipher::Aes256Gcm, Cipher::Chacha20Poly1305];

    fn number(self) -> u16 {
        match self {
            Cipher::Aes128Gcm => 51,
            Cipher::Aes256Gcm => 52,
            Cipher::Chacha20Poly1305 => 54,
        }
    }

    fn key_len(self) -> usize {
        match self {
            Cipher::Aes128Gcm => 16,
            Cipher::Aes256Gcm | Cipher::Chacha20Poly1305 => 32,
        }
    }

    /// The part of TLS 1.3's 12-byte IV the kernel calls salt: 4 bytes for
    /// AES-GCM (its "implicit" nonce), none for ChaCha20-Poly1305, which
    /// takes all 12 as its IV.
    fn salt_len(self) -> usize {
        match self {
            Cipher::Aes128Gcm | Cipher::Aes256Gcm => 4,
            Cipher::Chacha20Poly1305 => 0,
        }
    }
}

/// `TLS_1_3_VERSION`.
const TLS_1_3: u16 = 0x0304;

impl CryptoInfo {
    /// TLS 1.3 keys: `iv` is the 12-byte per-direction IV of RFC 8446
    /// §5.3 (the nonce is it XORed with the sequence number, which the
    /// kernel does from `seq`, the next record's number). None if the
    /// lengths do not fit the cipher.
    pub(crate) fn tls13(cipher: Cipher, key: &[u8], iv: &[u8], seq: u64) -> Option<CryptoInfo> {
        if key.len() != cipher.key_len() || iv.len() != 12 {
            return None;
        }
        let (salt, explicit) = iv.split_at(cipher.salt_len());
        let mut bytes = Vec::with_capacity(4 + 12 + 32 + 8);
        bytes.extend_from_slice(&TLS_1_3.to_ne_bytes());
        bytes.extend_from_slice(&cipher.number().to_ne_bytes());
        bytes.extend_from_slice(explicit);
        bytes.extend_from_slice(key);
        bytes.extend_from_slice(salt);
        bytes.extend_from_slice(&seq.to_be_bytes());
        Some(CryptoInfo { bytes })
    }

    #[cfg(test)]
    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }
}

impl Drop for CryptoInfo {
    /// Keys do not outlive their use in this process's memory longer than
    /// needed (best effort: the kernel keeps its own copy).
    fn drop(&mut self) {
        for b in self.bytes.iter_mut() {
            // SAFETY: `b` is a valid, aligned `&mut u8`; a volatile write
            // keeps the compiler from dropping the zeroing as dead.
            unsafe { std::ptr::write_volatile(b, 0) };
        }
    }
}

#[cfg(target_os = "linux")]
mod linux {
    use super::*;

    pub(super) const SOL_TLS: libc::c_int = 282;
    pub(super) const TLS_TX: libc::c_int = 1;
    pub(super) const TLS_RX: libc::c_int = 2;
    pub(super) const TLS_SET_RECORD_TYPE: libc::c_int = 1;
    pub(super) const TLS_GET_RECORD_TYPE: libc::c_int = 2;

    pub(super) fn setsockopt(fd: RawFd, level: libc::c_int, name: libc::c_int, value: &[u8]) -> io::Result<()> {
        let len = libc::socklen_t::try_from(value.len()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: `value` is a live slice of `len` bytes, which the kernel
        // only reads; `fd` is a descriptor the caller owns.
        let rc = unsafe { libc::setsockopt(fd, level, name, value.as_ptr().cast(), len) };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// Room for one control message carrying one byte (the record type).
    pub(super) const CMSG_ROOM: usize = 64;
}

/// Hands `socket`'s records to the kernel: the `tls` ULP, then the keys for
/// sending (`tx`) and receiving (`rx`). An error before `TLS_TX` is set
/// leaves a plain TCP socket (ENOENT: the kernel has no `tls` module); one
/// after leaves a socket that can no longer be used for TLS in user space.
#[cfg(target_os = "linux")]
pub(crate) fn install(socket: &impl AsRawFd, tx: &CryptoInfo, rx: &CryptoInfo) -> io::Result<()> {
    let fd = socket.as_raw_fd();
    linux::setsockopt(fd, libc::IPPROTO_TCP, libc::TCP_ULP, b"tls")?;
    linux::setsockopt(fd, linux::SOL_TLS, linux::TLS_TX, &tx.bytes)?;
    linux::setsockopt(fd, linux::SOL_TLS, linux::TLS_RX, &rx.bytes)
}

/// Which of [`Cipher::ALL`] this kernel can take, found once on a loopback
/// connection of our own (a ULP attaches only to an established TCP
/// socket; each cipher on a connection of its own, since the keys are set
/// once per socket), with throwaway keys; nothing is sent on them. Empty
/// where the kernel has no `tls` module: the error says why.
#[cfg(target_os = "linux")]
pub(crate) fn probe() -> Result<Vec<Cipher>, io::Error> {
    use std::net::{TcpListener, TcpStream};
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let mut ciphers = Vec::new();
    for cipher in Cipher::ALL {
        let _client = TcpStream::connect(addr)?;
        let (server, _) = listener.accept()?;
        let fd = server.as_raw_fd();
        // The module's absence shows here, for every cipher alike.
        linux::setsockopt(fd, libc::IPPROTO_TCP, libc::TCP_ULP, b"tls")?;
        let key = [0x5a; 32];
        let info = CryptoInfo::tls13(cipher, &key[..cipher.key_len()], &[0xa5; 12], 0)
            .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
        let tx = linux::setsockopt(fd, linux::SOL_TLS, linux::TLS_TX, &info.bytes);
        let rx = linux::setsockopt(fd, linux::SOL_TLS, linux::TLS_RX, &info.bytes);
        if tx.is_ok() && rx.is_ok() {
            ciphers.push(cipher);
        }
    }
    Ok(ciphers)
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn probe() -> Result<Vec<Cipher>, io::Error> {
    Err(io::Error::new(io::ErrorKind::Unsupported, "kernel TLS is Linux's"))
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn install(_: &impl std::os::fd::AsRawFd, _: &CryptoInfo, _: &CryptoInfo) -> io::Result<()> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
}

/// A TLS record's content type (RFC 8446 §5.1).
pub(crate) const RECORD_ALERT: u8 = 21;
pub(crate) const RECORD_HANDSHAKE: u8 = 22;
pub(crate) const RECORD_APPLICATION_DATA: u8 = 23;

/// Reads from a kTLS socket into `buf`: `(type, n)`. Application data
/// comes as from `read`; any other record comes alone, whole if it fits,
/// with its type (the kernel never mixes two types in one read).
#[cfg(target_os = "linux")]
pub(crate) fn recv_record(socket: &impl AsRawFd, buf: &mut [u8]) -> io::Result<(u8, usize)> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // u64s: the control buffer must be aligned as a cmsghdr.
    let mut cmsg = [0u64; linux::CMSG_ROOM / 8];
    // SAFETY: an all-zero msghdr is valid (null name, no iovecs).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cmsg.as_mut_ptr().cast();
    msg.msg_controllen = linux::CMSG_ROOM as _;
    // SAFETY: `msg` points at `iov` (over `buf`) and `cmsg`, both live
    // and writable for the lengths given.
    let n = unsafe { libc::recvmsg(socket.as_raw_fd(), &mut msg, 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let n = n as usize;
    let mut kind = RECORD_APPLICATION_DATA;
    // SAFETY: `msg` was filled by recvmsg; CMSG_FIRSTHDR/NXTHDR stay
    // within `msg_control`/`msg_controllen`, and CMSG_DATA of a
    // TLS_GET_RECORD_TYPE message holds one byte.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == linux::SOL_TLS && (*c).cmsg_type == linux::TLS_GET_RECORD_TYPE {
                kind = *libc::CMSG_DATA(c);
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok((kind, n))
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn recv_record(_: &impl std::os::fd::AsRawFd, _: &mut [u8]) -> io::Result<(u8, usize)> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
}

/// Sends one record of type `kind` holding `payload` on a kTLS socket (an
/// alert: close_notify is `[1, 0]`), without blocking.
#[cfg(target_os = "linux")]
pub(crate) fn send_record(socket: &impl AsRawFd, kind: u8, payload: &[u8]) -> io::Result<usize> {
    let mut iov = libc::iovec {
        iov_base: payload.as_ptr() as *mut libc::c_void,
        iov_len: payload.len(),
    };
    let mut cmsg = [0u64; linux::CMSG_ROOM / 8];
    // SAFETY: as in `recv_record`.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = cmsg.as_mut_ptr().cast();
    // SAFETY: CMSG_SPACE is a pure computation.
    msg.msg_controllen = unsafe { libc::CMSG_SPACE(1) } as _;
    // SAFETY: the control buffer holds CMSG_SPACE(1) bytes (<= CMSG_ROOM),
    // aligned; the first header and its one data byte lie within it. The
    // kernel only reads `payload` through `iov`.
    let n = unsafe {
        let c = libc::CMSG_FIRSTHDR(&msg);
        (*c).cmsg_level = linux::SOL_TLS;
        (*c).cmsg_type = linux::TLS_SET_RECORD_TYPE;
        (*c).cmsg_len = libc::CMSG_LEN(1) as _;
        *libc::CMSG_DATA(c) = kind;
        libc::sendmsg(socket.as_raw_fd(), &msg, libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL)
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn send_record(_: &impl std::os::fd::AsRawFd, _: u8, _: &[u8]) -> io::Result<usize> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls13_aes_gcm_splits_the_iv_into_salt_and_explicit_part() {
        let key: Vec<u8> = (0..16).collect();
        let iv: Vec<u8> = (100..112).collect();
        let info = CryptoInfo::tls13(Cipher::Aes128Gcm, &key, &iv, 0x0102).unwrap();
        let b = info.as_bytes();
        // tls12_crypto_info_aes_gcm_128: 4 + 8 + 16 + 4 + 8 bytes.
        assert_eq!(b.len(), 40);
        assert_eq!(&b[..2], &0x0304u16.to_ne_bytes());
        assert_eq!(&b[2..4], &51u16.to_ne_bytes());
        assert_eq!(&b[4..12], &iv[4..], "iv: the last 8 bytes");
        assert_eq!(&b[12..28], &key[..]);
        assert_eq!(&b[28..32], &iv[..4], "salt: the first 4 bytes");
        assert_eq!(&b[32..], &[0, 0, 0, 0, 0, 0, 1, 2], "rec_seq, big-endian");
    }

    #[test]
    fn tls13_aes256_and_chacha_have_the_kernels_sizes() {
        let key = [7u8; 32];
        let iv = [9u8; 12];
        // tls12_crypto_info_aes_gcm_256: 4 + 8 + 32 + 4 + 8.
        assert_eq!(
            CryptoInfo::tls13(Cipher::Aes256Gcm, &key, &iv, 0)
                .unwrap()
                .as_bytes()
                .len(),
            56
        );
        // tls12_crypto_info_chacha20_poly1305: 4 + 12 + 32 + 0 + 8.
        let chacha = CryptoInfo::tls13(Cipher::Chacha20Poly1305, &key, &iv, 5).unwrap();
        assert_eq!(chacha.as_bytes().len(), 56);
        assert_eq!(&chacha.as_bytes()[4..16], &iv[..]);
        assert!(
            CryptoInfo::tls13(Cipher::Aes128Gcm, &key, &iv, 0).is_none(),
            "a 32-byte key is no AES-128 key"
        );
    }

    #[test]
    fn probe_agrees_with_the_kernels_list_of_ulps() {
        let probed = probe();
        // Read after the probe, which may have loaded the module.
        let listed = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_ulp").unwrap_or_default();
        match probed {
            Ok(ciphers) => assert!(!ciphers.is_empty() && listed.split_whitespace().any(|u| u == "tls")),
            // The module may be loadable but not loaded: then the probe
            // loaded it (the kernel autoloads a ULP on request) and worked;
            // an error means there is none.
            Err(e) => assert!(!listed.split_whitespace().any(|u| u == "tls"), "{e}"),
        }
    }
}
