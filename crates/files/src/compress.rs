//! Compression: what `pack` stores for every text file, and what `serve
//! DIR` makes on the fly for a text file that has no pre-compressed
//! sibling, with the same settings, so that a directory sends the same
//! bytes as its archive.
//!
//! On the fly, a file is compressed once, on a thread of its own (never on
//! an event loop: brotli at quality 11 runs at about 1 MB/s), and the result
//! is kept process-wide by file identity within `COMPRESSED_BYTES_MAX`. A
//! file is queued only when a request for it accepts some coding: clients
//! that accept none (scripts, `curl`, load generators) cost no compression,
//! which over 10,000 text files was more than half the server's CPU (the
//! `real10k` benchmark, before). A worker that finds no result yet answers
//! in identity and queues the file;
//! its cache entry holds a flag the compressing thread raises when done,
//! one plain atomic load per hit, and the next hit after that rebuilds the
//! entry with the new variants. The store's lock is taken only when an
//! entry is built, never on a hit.

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, SyncSender};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Duration;

use peregrine::SharedBytes;

use crate::encoding::Encoding;
use crate::sys::FileId;

/// Smallest body worth compressing (pack's rule too).
pub const COMPRESS_MIN_BYTES: u64 = 128;
/// Largest file compressed on the fly: brotli 11 takes seconds per MiB, and
/// a larger text file is rare enough to pre-compress (`NAME.br`) or pack.
pub const COMPRESS_ON_THE_FLY_BYTES_MAX: u64 = 4 << 20;
/// Compressed bytes kept process-wide; past it the oldest results are
/// dropped (cache entries holding them keep them until they are rebuilt).
pub const COMPRESSED_BYTES_MAX: usize = 64 << 20;
/// Files waiting to be compressed; past it a file is not queued this time
/// (it is, the next time its entry is built).
const QUEUE_MAX: usize = 1024;

/// Identity first, then the codings that came out smaller (`None`:
/// identity).
pub type Encoded = Vec<(Option<Encoding>, Vec<u8>)>;

/// `body` and its compressed forms that are smaller than it (brotli 11,
/// zstd 19, gzip 9), or identity alone for a small or binary body.
///
/// The body is taken, not copied: it becomes the identity variant (pack
/// holds large files whole, and a copy doubled that).
pub fn encode(body: Vec<u8>, content_type: &str, compress: bool) -> io::Result<Encoded> {
    if !compress || (body.len() as u64) < COMPRESS_MIN_BYTES || !compressible(content_type) {
        return Ok(vec![(None, body)]);
    }
    let mut packed = Vec::new();
    for coding in Encoding::ALL {
        let bytes = compress_one(&body, coding)?;
        if bytes.len() < body.len() {
            packed.push((Some(coding), bytes));
        }
    }
    let mut out = Vec::with_capacity(1 + packed.len());
    out.push((None, body));
    out.extend(packed);
    Ok(out)
}

fn compress_one(body: &[u8], coding: Encoding) -> io::Result<Vec<u8>> {
    Ok(match coding {
        Encoding::Brotli => {
            let mut o = Vec::new();
            // The window need not exceed the body: a 4 MiB window (lgwin
            // 22) for a 1 KiB file only costs set-up time.
            let lgwin = body.len().next_power_of_two().trailing_zeros().clamp(10, 22) as i32;
            let params = brotli::enc::BrotliEncoderParams {
                quality: 11,
                lgwin,
                size_hint: body.len(),
                ..Default::default()
            };
            brotli::BrotliCompress(&mut &body[..], &mut o, &params)?;
            o
        }
        Encoding::Zstd => zstd::bulk::compress(body, 19)?,
        Encoding::Gzip => {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
            e.write_all(body)?;
            e.finish()?
        }
    })
}

/// Whether a content type is worth compressing: text, JSON, XML, wasm,
/// icons and uncompressed fonts.
pub fn compressible(content_type: &str) -> bool {
    let t = content_type.split(';').next().unwrap_or_default();
    t.starts_with("text/")
        || t.ends_with("+json")
        || t.ends_with("+xml")
        || matches!(
            t,
            "application/json"
                | "application/xml"
                | "application/javascript"
                | "application/wasm"
                | "image/x-icon"
                | "image/vnd.microsoft.icon"
                | "application/vnd.ms-fontobject"
                | "font/ttf"
                | "font/otf"
        )
}

/// What a worker learns about a file's compressed forms.
pub enum Lookup {
    /// Done: the smaller codings, in `Encoding::ALL` order (possibly none).
    Ready(Vec<(Encoding, SharedBytes)>),
    /// Queued or being made: the flag is raised when done.
    Pending(Arc<AtomicBool>),
}

#[derive(Default)]
struct Store {
    done: HashMap<FileId, Vec<(Encoding, SharedBytes)>>,
    order: VecDeque<FileId>,
    bytes: usize,
    in_flight: HashMap<FileId, Arc<AtomicBool>>,
    /// Jobs queued or running, for [`settled`].
    n_busy: usize,
}

struct Job {
    id: FileId,
    source: Source,
    done: Arc<AtomicBool>,
}

/// Where the compressing thread reads a file's bytes.
pub enum Source {
    /// The open file (read whole, then checked to be unchanged).
    File(Arc<File>),
    /// The bytes a worker already read and serves in identity.
    Bytes(SharedBytes),
}

fn store() -> &'static (Mutex<Store>, Condvar) {
    static STORE: OnceLock<(Mutex<Store>, Condvar)> = OnceLock::new();
    STORE.get_or_init(Default::default)
}

fn queue() -> Option<&'static SyncSender<Job>> {
    static QUEUE: OnceLock<Option<SyncSender<Job>>> = OnceLock::new();
    QUEUE
        .get_or_init(|| {
            let (tx, rx) = mpsc::sync_channel::<Job>(QUEUE_MAX);
            let spawned = std::thread::Builder::new()
                .name("peregrine-compress".into())
                .spawn(move || {
                    for job in rx {
                        run(job);
                    }
                });
            match spawned {
                Ok(_) => Some(tx),
                Err(e) => {
                    peregrine::log::warn(format_args!("no on-the-fly compression: cannot start its thread: {e}"));
                    None
                }
            }
        })
        .as_ref()
}

/// The compressed forms of the file `id` if they are ready or being made;
/// `None`: not asked for yet (or dropped from the store since).
pub fn find(id: FileId) -> Option<Lookup> {
    let (lock, _) = store();
    let s = lock.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(found) = s.done.get(&id) {
        return Some(Lookup::Ready(found.clone()));
    }
    s.in_flight.get(&id).map(|flag| Lookup::Pending(flag.clone()))
}

/// The compressed forms of the file `id`: ready, or queued now (or
/// already), or `None` when it could not be queued. `source` gives its
/// bytes to the compressing thread, asked for only when it is queued.
pub fn lookup(id: FileId, source: impl FnOnce() -> Option<Source>) -> Option<Lookup> {
    let (lock, _) = store();
    let mut s = lock.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(found) = s.done.get(&id) {
        return Some(Lookup::Ready(found.clone()));
    }
    if let Some(flag) = s.in_flight.get(&id) {
        return Some(Lookup::Pending(flag.clone()));
    }
    let done = Arc::new(AtomicBool::new(false));
    let job = Job {
        id,
        source: source()?,
        done: done.clone(),
    };
    queue()?.try_send(job).ok()?;
    s.in_flight.insert(id, done.clone());
    s.n_busy += 1;
    Some(Lookup::Pending(done))
}

fn run(job: Job) {
    let read_whole = |file: &File| {
        let mut body = vec![0; job.id.size as usize];
        file.read_exact_at(&mut body, 0).map(|()| body)
    };
    // Kept only if the file is still the one that was asked for; else the
    // next build queues the new file. A file that cannot be read, or whose
    // forms exceed the whole store, is kept with no forms, so that it is not
    // queued again and again. Bytes a worker read are what it serves, and
    // their forms are theirs.
    let (read, unchanged): (io::Result<std::borrow::Cow<'_, [u8]>>, bool) = match &job.source {
        Source::File(file) => (
            read_whole(file).map(std::borrow::Cow::Owned),
            crate::sys::fstat(file).is_ok_and(|now| now == job.id),
        ),
        Source::Bytes(bytes) => (Ok(std::borrow::Cow::Borrowed(bytes.as_slice())), true),
    };
    let mut variants = Vec::new();
    if let (true, Err(e)) = (unchanged, &read) {
        peregrine::log::warn(format_args!("cannot read a file to compress it: {e}"));
    }
    if let (true, Ok(body)) = (unchanged, &read) {
        for coding in Encoding::ALL {
            match compress_one(body, coding) {
                Ok(packed) if packed.len() < body.len() => {
                    variants.push((coding, SharedBytes::new(Arc::new(packed))));
                }
                Ok(_) => {}
                Err(e) => peregrine::log::warn(format_args!("cannot compress ({}): {e}", coding.name())),
            }
        }
    }
    let (lock, settled) = store();
    let mut s = lock.lock().unwrap_or_else(|e| e.into_inner());
    s.in_flight.remove(&job.id);
    s.n_busy -= 1;
    if unchanged {
        let mut n_bytes: usize = variants.iter().map(|(_, b)| b.as_slice().len()).sum();
        if n_bytes > COMPRESSED_BYTES_MAX {
            variants.clear();
            n_bytes = 0;
        }
        {
            while s.bytes + n_bytes > COMPRESSED_BYTES_MAX {
                let Some(oldest) = s.order.pop_front() else { break };
                if let Some(gone) = s.done.remove(&oldest) {
                    s.bytes -= gone.iter().map(|(_, b)| b.as_slice().len()).sum::<usize>();
                }
            }
            s.bytes += n_bytes;
            s.order.push_back(job.id);
            s.done.insert(job.id, variants);
        }
    }
    job.done.store(true, Ordering::Release);
    settled.notify_all();
}

/// Waits until no file is queued or being compressed, for up to `timeout`;
/// whether that happened. For tests, and for warming a cache before a
/// benchmark.
pub fn settled(timeout: Duration) -> bool {
    let (lock, cv) = store();
    let s = lock.lock().unwrap_or_else(|e| e.into_inner());
    let (s, _) = cv
        .wait_timeout_while(s, timeout, |s| s.n_busy > 0)
        .unwrap_or_else(|e| e.into_inner());
    s.n_busy == 0
}
