//! `sendfile(2)`: file bytes to a socket without passing through user space;
//! and `pread(2)` for bodies that must pass through it (HTTP/2, TLS). Both
//! through `rustix`: the system calls themselves, with safe signatures.
//! Linux's `sendfile` only: elsewhere file bytes go through a buffer
//! (`pread`, then `write`), one copy more per byte.

use std::fs::File;
use std::io;
use std::os::fd::AsFd;

/// Sends up to `len` bytes of `file` from `offset` to `socket`. Returns the
/// number sent; 0 means the file ended before `offset` (it shrank).
#[cfg(target_os = "linux")]
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

/// What [`sendfile`] does where the kernel has no `sendfile` with Linux's
/// meaning: at most [`COPY_BYTES_MAX`] bytes read with `pread(2)` into a
/// buffer on the stack, then one `write(2)` of them. Returns the number
/// written (the rest is read again on the next call, from its offset);
/// 0 means the file ended before `offset`.
#[cfg(any(not(target_os = "linux"), test))]
pub(crate) fn sendfile_copy(socket: &impl AsFd, file: &File, offset: u64, len: u64) -> io::Result<usize> {
    let mut buf = [0u8; COPY_BYTES_MAX];
    let want = usize::try_from(len).unwrap_or(COPY_BYTES_MAX).min(COPY_BYTES_MAX);
    if i64::try_from(offset).is_err() {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    let read = loop {
        match rustix::io::pread(file, &mut buf[..want], offset) {
            Ok(n) => break n,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    };
    if read == 0 {
        return Ok(0);
    }
    Ok(rustix::io::write(socket, &buf[..read])?)
}

/// The most bytes [`sendfile_copy`] moves per call: 64 KiB, a socket
/// buffer's worth: a bigger one would mostly be written in part.
#[cfg(any(not(target_os = "linux"), test))]
const COPY_BYTES_MAX: usize = 64 * 1024;

#[cfg(not(target_os = "linux"))]
pub(crate) use sendfile_copy as sendfile;

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

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::os::unix::net::UnixStream;

    use super::*;

    fn file_with(bytes: &[u8]) -> File {
        let path = std::env::temp_dir().join(format!("peregrine-sendfile-{}-{}", std::process::id(), bytes.len()));
        std::fs::File::create(&path).unwrap().write_all(bytes).unwrap();
        let file = File::open(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        file
    }

    // The copy that stands for sendfile outside Linux, tested here: the
    // bytes from the offset, at most the length asked and at most one
    // buffer's worth per call, and 0 once the file has ended.
    #[test]
    fn sendfile_copy_sends_the_range_a_buffer_at_a_time() {
        let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let file = file_with(&data);
        let (a, mut b) = UnixStream::pair().unwrap();
        let reader = std::thread::spawn(move || {
            let mut got = Vec::new();
            b.read_to_end(&mut got).unwrap();
            got
        });
        let (offset, len) = (1_000u64, 150_000u64);
        let mut sent = 0u64;
        while sent < len {
            let n = sendfile_copy(&a, &file, offset + sent, len - sent).unwrap();
            assert!(n > 0 && n <= COPY_BYTES_MAX, "{n}");
            sent += n as u64;
        }
        assert_eq!(sent, len);
        assert_eq!(sendfile_copy(&a, &file, data.len() as u64, 10).unwrap(), 0);
        assert_eq!(sendfile_copy(&a, &file, data.len() as u64 + 5, 10).unwrap(), 0);
        drop(a);
        assert_eq!(reader.join().unwrap(), &data[1_000..151_000]);
    }

    // Linux's sendfile and the copy agree on a short tail and on an
    // offset past the end (the file shrank).
    #[test]
    fn sendfile_and_its_copy_agree_at_the_end_of_the_file() {
        let file = file_with(b"0123456789");
        type Send = fn(&UnixStream, &File, u64, u64) -> io::Result<usize>;
        let sends: [Send; 2] = [
            |s, f, o, l| sendfile_copy(s, f, o, l),
            |s, f, o, l| sendfile(s, f, o, l),
        ];
        for send in sends {
            let (a, mut b) = UnixStream::pair().unwrap();
            assert_eq!(send(&a, &file, 7, 100).unwrap(), 3);
            assert_eq!(send(&a, &file, 10, 100).unwrap(), 0);
            drop(a);
            let mut got = Vec::new();
            b.read_to_end(&mut got).unwrap();
            assert_eq!(got, b"789");
        }
    }
}
