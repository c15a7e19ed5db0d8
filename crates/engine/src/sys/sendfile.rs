//! `sendfile(2)`: file bytes to a socket without passing through user space;
//! and `pread(2)` for bodies that must pass through it (HTTP/2, TLS). Both
//! through `rustix`: the system calls themselves, with safe signatures.

use std::fs::File;
use std::io;
use std::os::fd::AsFd;

/// Sends up to `len` bytes of `file` from `offset` to `socket`. Returns the
/// number sent; 0 means the file ended before `offset` (it shrank).
pub(crate) fn sendfile(socket: &impl AsFd, file: &File, offset: u64, len: u64) -> io::Result<usize> {
    // As a signed off_t in the kernel: refuse what would turn negative.
    if i64::try_from(offset).is_err() {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    let mut off = offset;
    // Linux sends at most 0x7ffff000 bytes per call anyway.
    let count = usize::try_from(len.min(0x7fff_f000)).unwrap_or(0x7fff_f000);
    Ok(rustix::fs::sendfile(socket, file, Some(&mut off), count)?)
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
        let at = offset + done as u64;
        if i64::try_from(at).is_err() {
            out.truncate(start);
            return Err(io::Error::from(io::ErrorKind::InvalidInput));
        }
        let spare = &mut out.spare_capacity_mut()[..len - done];
        match rustix::io::pread(file, spare, at) {
            Ok((read, _)) if !read.is_empty() => {
                let n = read.len();
                // SAFETY: pread initialised the first n bytes of the spare
                // capacity, which begins at the vector's length.
                unsafe { out.set_len(out.len() + n) };
                done += n;
            }
            Ok(_) => {
                out.truncate(start);
                return Err(io::Error::from(io::ErrorKind::UnexpectedEof));
            }
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => {
                out.truncate(start);
                return Err(e.into());
            }
        }
    }
    Ok(())
}
