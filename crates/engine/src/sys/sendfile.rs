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

/// Appends exactly `len` bytes of `file` from `offset` to `out` with
/// `pread(2)`, into `out`'s spare capacity: no zero-filling of the room
/// first (for HTTP/2 DATA frames, where file bytes are copied through user
/// space: the zeroing was a third pass over every byte). An error, or the
/// file ending early (it shrank), leaves `out` as it was.
pub(crate) fn pread_append(file: &File, out: &mut Vec<u8>, len: usize, offset: u64) -> io::Result<()> {
    let start = out.len();
    out.reserve(len);
    let mut done = 0;
    while done < len {
        let at =
            libc::off_t::try_from(offset + done as u64).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        let spare = &mut out.spare_capacity_mut()[..len - done];
        // SAFETY: the pointer and length describe `spare`, memory `out` owns
        // and nothing else refers to; pread writes at most that many bytes
        // there and says how many, and only those are marked initialised.
        let n = unsafe { libc::pread(file.as_raw_fd(), spare.as_mut_ptr().cast(), spare.len(), at) };
        match n {
            n if n > 0 => {
                // SAFETY: pread initialised the first n bytes of `spare`,
                // which begins at the vector's length.
                unsafe { out.set_len(out.len() + n as usize) };
                done += n as usize;
            }
            0 => {
                out.truncate(start);
                return Err(io::Error::from(io::ErrorKind::UnexpectedEof));
            }
            _ => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    out.truncate(start);
                    return Err(e);
                }
            }
        }
    }
    Ok(())
}
