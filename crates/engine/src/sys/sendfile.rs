//! `sendfile(2)`: file bytes to a socket without passing through user space.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// Sends up to `len` bytes of `file` from `offset` to `socket`. Returns the
/// number sent; 0 means the file ended before `offset` (it shrank).
pub(crate) fn sendfile(socket: &impl AsRawFd, file: &File, offset: u64, len: u64) -> io::Result<usize> {
    let mut off = libc::off_t::try_from(offset).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // Linux sends at most 0x7ffff000 bytes per call anyway.
    let count = usize::try_from(len.min(0x7fff_f000)).unwrap_or(0x7fff_f000);
    // SAFETY: both descriptors are open for the duration of the call (we hold
    // references to their owners), and `off` is a valid, writable off_t.
    let n = unsafe { libc::sendfile(socket.as_raw_fd(), file.as_raw_fd(), &mut off, count) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}
