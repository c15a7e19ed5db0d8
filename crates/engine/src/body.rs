//! Bodies that cross threads: a response body another thread writes while
//! it is being sent ([`channel`]), and a request body another thread reads
//! as it arrives ([`BodyReader`], for handlers wrapped in [`streamed`]).
//!
//! A channel is a queue of chunks bounded in bytes, shared by the
//! [`Sender`] (any thread, blocking) and the event loop, which takes a chunk
//! only when the connection can send it: while the client reads slowly the
//! queue fills and `send` blocks, so a producer can never buffer more than
//! the capacity ahead of the socket (back-pressure). The event loop never
//! blocks: when the queue is empty it parks the response and goes on with
//! other connections (and other streams of the same HTTP/2 or HTTP/3
//! connection); the next chunk wakes it through the worker's mailbox, as a
//! deferred answer does (`responder.rs`).
//!
//! The end of the body is the sender's drop; [`Sender::abort`] ends it as
//! broken (HTTP/1.1: the connection closes before the last chunk; HTTP/2:
//! RST_STREAM; HTTP/3: the stream is reset). Once the client is gone, or the
//! connection closed for any reason, `send` fails, so a producer thread ends.

use std::collections::VecDeque;
use std::fmt;
use std::io::{self, Read};
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use crate::handler::{BodyUse, Handler, Reply};
use crate::message::trailers::Trailers;
use crate::request::Request;
use crate::responder::{Mailbox, Post};
use crate::response::Body;

/// A response body written from another thread over time, and its sender.
/// `capacity_bytes` bounds the bytes queued between the producer and the
/// connection (at least one chunk is always accepted, however large).
///
/// ```no_run
/// use peregrine::{body, Request, Response, Server};
///
/// Server::new().bind("127.0.0.1:8080").serve(|_: &Request<'_>| {
///     let (body, tx) = body::channel(64 * 1024);
///     std::thread::spawn(move || {
///         for i in 0.. {
///             // Blocks while the client is slow; fails once it is gone.
///             if tx.send(format!("tick {i}\n")).is_err() {
///                 break;
///             }
///             std::thread::sleep(std::time::Duration::from_secs(1));
///         }
///     });
///     Response::new(200).with_content_type("text/plain").with_body(body)
/// }).unwrap();
/// ```
pub fn channel(capacity_bytes: usize) -> (Body, Sender) {
    channel_of(capacity_bytes, None)
}

fn channel_of(capacity_bytes: usize, length: Option<u64>) -> (Body, Sender) {
    channel_counted(capacity_bytes, length, None)
}

fn channel_counted(capacity_bytes: usize, length: Option<u64>, held: Option<Arc<AtomicUsize>>) -> (Body, Sender) {
    let shared = Arc::new(Shared {
        queue: Queue::new(capacity_bytes.max(1), End::Open),
        parked: AtomicBool::new(false),
        finished_at: std::sync::OnceLock::new(),
        taken: AtomicU64::new(0),
        held,
        trailers: std::sync::OnceLock::new(),
    });
    (
        Body::Channel(ChannelBody {
            shared: shared.clone(),
            length,
        }),
        Sender { shared },
    )
}

/// A [`channel`] whose body is `length` bytes long, told in the answer's
/// head (`Content-Length`, not chunked): the reverse proxy's for an
/// upstream answer of known length. The sender must send exactly that
/// many bytes, or abort (the connection is then closed).
pub(crate) fn channel_sized(capacity_bytes: usize, length: u64) -> (Body, Sender) {
    channel_of(capacity_bytes, Some(length))
}

/// A [`channel`] (of `length` bytes, if known) whose queued bytes are
/// counted in `held` while they wait: the reverse proxy's answers, read
/// ahead of their clients, counted in the worker's output budget
/// (`BufPool::read_ahead`, `Limits::output_budget_bytes`).
pub(crate) fn channel_held(capacity_bytes: usize, length: Option<u64>, held: Arc<AtomicUsize>) -> (Body, Sender) {
    channel_counted(capacity_bytes, length, Some(held))
}

/// The producing end of a [`channel`]: `Send` and `Sync`, usable from any
/// thread. Dropping it ends the body normally.
pub struct Sender {
    shared: Arc<Shared>,
}

/// The receiving end of a [`channel`], inside [`Body::Channel`]. The
/// engine reads it; an application only passes it on.
pub struct ChannelBody {
    shared: Arc<Shared>,
    /// The body's length, when its head says it ([`channel_sized`]).
    length: Option<u64>,
}

/// `Sender::send` failed: the client is gone or the connection closed
/// (the chunk is given back).
#[derive(Debug)]
pub struct SendError(pub Vec<u8>);

/// Why `Sender::try_send` did not queue the chunk (given back).
#[derive(Debug)]
pub enum TrySendError {
    /// The queue holds `capacity_bytes` already: try later.
    Full(Vec<u8>),
    /// The client is gone or the connection closed.
    Closed(Vec<u8>),
}

/// A queue of chunks between the event loop and another thread, bounded
/// in bytes: a response channel (the other thread produces) and a request
/// body pipe (it consumes) are each one, with their own kind of end.
struct Queue<E> {
    state: Mutex<Chunked<E>>,
    /// Signals the other thread: room for a sender, bytes or the end for
    /// a reader.
    signal: Condvar,
    capacity: usize,
}

struct Chunked<E> {
    chunks: VecDeque<Vec<u8>>,
    /// Bytes in `chunks`.
    bytes: usize,
    end: E,
    /// The other thread's end was dropped (the channel's receiver: the
    /// connection is done with the body; the pipe's reader: the handler).
    gone: bool,
    /// The event loop waits for a wake from the other thread (the
    /// channel's receiver parked on an empty queue; the pipe's sink found
    /// no room).
    waiting: bool,
    /// Threads blocked on the queue's `signal` (a handler's blocking
    /// `send` or body read). Only then is it notified: `notify_one` is a
    /// futex call whether anyone waits or not, and the proxy's answers,
    /// whose producer is the worker itself, paid three per 64 KiB answer
    /// (`bench/lib/proxy.py`'s proxy-64k).
    sleepers: usize,
    /// Where the wake goes: the worker's mailbox and the connection's token.
    wake: Option<(Arc<Mailbox>, usize)>,
    /// A party on an event loop other than the connection waits (the
    /// proxy's upstream connection): in a response channel the producer,
    /// for room (woken when half is free again, or the consumer is gone);
    /// in a request pipe the reader, for bytes or the end.
    loop_waiter: Option<(Arc<Mailbox>, usize)>,
    /// A request pipe's reader will say when a client waiting for `100
    /// Continue` gets it (the proxy relays its upstream's): the
    /// connection does not send it when the reader is taken.
    continue_held: bool,
}

impl<E> Queue<E> {
    fn new(capacity: usize, end: E) -> Self {
        Queue {
            state: Mutex::new(Chunked {
                chunks: VecDeque::new(),
                bytes: 0,
                end,
                gone: false,
                waiting: false,
                sleepers: 0,
                wake: None,
                loop_waiter: None,
                continue_held: false,
            }),
            signal: Condvar::new(),
            capacity,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Chunked<E>> {
        // A poisoned lock only means a thread panicked holding it; the
        // queue is still sound.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits on `signal`, giving the lock back meanwhile.
    fn wait<'a>(&self, mut state: MutexGuard<'a, Chunked<E>>) -> MutexGuard<'a, Chunked<E>> {
        state.sleepers += 1;
        let mut state = self.signal.wait(state).unwrap_or_else(|e| e.into_inner());
        state.sleepers -= 1;
        state
    }

    /// Wakes the threads blocked on `signal`, if `sleeping` (read under
    /// the lock: a thread about to wait holds it while it counts itself,
    /// then checks what changed, so none is missed).
    fn notify(&self, sleeping: bool) {
        if sleeping {
            self.signal.notify_all();
        }
    }
}

impl<E> Chunked<E> {
    fn push(&mut self, chunk: Vec<u8>) {
        if !chunk.is_empty() {
            self.bytes += chunk.len();
            self.chunks.push_back(chunk);
        }
    }

    fn pop(&mut self) -> Option<Vec<u8>> {
        let chunk = self.chunks.pop_front()?;
        self.bytes -= chunk.len();
        Some(chunk)
    }

    fn clear(&mut self) {
        self.chunks.clear();
        self.bytes = 0;
    }

    /// The wake the event loop waits for, if it waits (taken under the
    /// lock; posted once the lock is released).
    fn take_wake(&mut self) -> Option<(Arc<Mailbox>, usize)> {
        if !self.waiting {
            return None;
        }
        self.waiting = false;
        self.wake.clone()
    }
}

struct Shared {
    queue: Queue<End>,
    /// The event loop found the queue empty and waits for a wake: read
    /// without the lock by the connection deciding whether to poll.
    parked: AtomicBool,
    /// When the sender ended the body normally: for the proxy, the
    /// upstream's last byte (`$upstream_response_time` of a streamed
    /// answer). One clock read per channel body.
    finished_at: std::sync::OnceLock<std::time::Instant>,
    /// The bytes the connection took from the queue to send: what the
    /// access log counts of a body cut short (`$body_bytes_sent`, not
    /// the length its head announced). Written by the connection only.
    taken: AtomicU64,
    /// Where the queued bytes are counted, if anywhere (`channel_held`):
    /// added as a chunk is queued, taken back as it leaves or is dropped.
    held: Option<Arc<AtomicUsize>>,
    /// The trailer fields the sender ended the body with, if any
    /// (`Sender::end_with_trailers`): set before the end, read after it.
    trailers: std::sync::OnceLock<Trailers>,
}

type State = Chunked<End>;

#[derive(Clone, Copy, PartialEq, Eq)]
enum End {
    Open,
    /// The sender was dropped: the body is complete.
    Finished,
    /// The sender aborted: the body is broken.
    Aborted,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.queue.lock()
    }

    /// `n` more bytes queued (`add`) or fewer, for `held`.
    fn count(&self, n: usize, add: bool) {
        if let (Some(held), true) = (&self.held, n > 0) {
            if add {
                held.fetch_add(n, Ordering::Relaxed);
            } else {
                held.fetch_sub(n, Ordering::Relaxed);
            }
        }
    }

    /// Drops every queued chunk, taking their bytes back from `held`.
    fn clear(&self, state: &mut State) {
        self.count(state.bytes, false);
        state.clear();
    }
}

/// Takes the wake the event loop waits for, if it is parked (called under
/// the lock; the post happens after it is released).
fn take_wake(shared: &Shared, state: &mut State) -> Option<(Arc<Mailbox>, usize)> {
    if !state.waiting {
        return None;
    }
    shared.parked.store(false, Ordering::Release);
    state.take_wake()
}

fn post(wake: Option<(Arc<Mailbox>, usize)>) {
    if let Some((mailbox, token)) = wake {
        mailbox.post(Post::Wake { token });
    }
}

impl Sender {
    /// Queues `chunk`, blocking while `capacity_bytes` are queued already
    /// (the client reads slower than the producer writes). Fails once the
    /// client is gone or the connection closed. An empty chunk is ignored.
    pub fn send(&self, chunk: impl Into<Vec<u8>>) -> Result<(), SendError> {
        let chunk = chunk.into();
        let shared = &*self.shared;
        let mut state = shared.lock();
        loop {
            if state.gone {
                return Err(SendError(chunk));
            }
            if fits(&state, shared.queue.capacity, chunk.len()) {
                break;
            }
            state = shared.queue.wait(state);
        }
        let wake = push(shared, &mut state, chunk);
        drop(state);
        post(wake);
        Ok(())
    }

    /// Queues `chunk` if there is room now, without blocking.
    pub fn try_send(&self, chunk: impl Into<Vec<u8>>) -> Result<(), TrySendError> {
        let chunk = chunk.into();
        let shared = &*self.shared;
        let mut state = shared.lock();
        if state.gone {
            return Err(TrySendError::Closed(chunk));
        }
        if !fits(&state, shared.queue.capacity, chunk.len()) {
            return Err(TrySendError::Full(chunk));
        }
        let wake = push(shared, &mut state, chunk);
        drop(state);
        post(wake);
        Ok(())
    }

    /// `try_send` for a producer on an event loop: when the queue is full,
    /// `token` is posted to `mailbox` once half of it is free again (or
    /// the client is gone), so the producer knows when to try again.
    pub(crate) fn try_send_or_wake(
        &self,
        chunk: Vec<u8>,
        mailbox: &Arc<Mailbox>,
        token: usize,
    ) -> Result<(), TrySendError> {
        let shared = &*self.shared;
        let mut state = shared.lock();
        if state.gone {
            return Err(TrySendError::Closed(chunk));
        }
        if !fits(&state, shared.queue.capacity, chunk.len()) {
            state.loop_waiter = Some((mailbox.clone(), token));
            return Err(TrySendError::Full(chunk));
        }
        let wake = push(shared, &mut state, chunk);
        drop(state);
        post(wake);
        Ok(())
    }

    /// For a producer on an event loop that must not add to the queue now
    /// (its worker's output budget is spent): if the queue holds bytes,
    /// `token` is posted to `mailbox` once half of it is free (or the
    /// client is gone) and this says `true`, wait; if it is empty, nothing
    /// would wake the producer, so `false`: it may queue one more chunk.
    pub(crate) fn wait_while_holding(&self, mailbox: &Arc<Mailbox>, token: usize) -> bool {
        let mut state = self.shared.lock();
        if state.gone || state.bytes == 0 {
            return false;
        }
        state.loop_waiter = Some((mailbox.clone(), token));
        true
    }

    /// Whether the client is gone or the connection closed (`send` would
    /// fail).
    pub fn is_closed(&self) -> bool {
        self.shared.lock().gone
    }

    /// Ends the body normally, with trailer fields after its last byte
    /// (RFC 9110 §6.5): over HTTP/2 and HTTP/3 always; over HTTP/1.1 when
    /// the answer is chunked (no `Content-Length`) and the client said
    /// `TE: trailers`, otherwise they are dropped (RFC 9112 §7.1.2).
    ///
    /// ```no_run
    /// use peregrine::{body, Request, Response, Server, Trailers};
    ///
    /// Server::new().bind("127.0.0.1:8080").serve(|_: &Request<'_>| {
    ///     let (body, tx) = body::channel(64 * 1024);
    ///     std::thread::spawn(move || {
    ///         let mut sum = 0u32;
    ///         for line in ["one\n", "two\n"] {
    ///             sum = line.bytes().fold(sum, |s, b| s.wrapping_add(u32::from(b)));
    ///             if tx.send(line).is_err() {
    ///                 return;
    ///             }
    ///         }
    ///         let sum = sum.to_string();
    ///         tx.end_with_trailers(Trailers::new(&[("x-sum", &sum)]).unwrap());
    ///     });
    ///     Response::new(200).with_content_type("text/plain").with_body(body)
    /// }).unwrap();
    /// ```
    pub fn end_with_trailers(self, trailers: Trailers) {
        let _ = self.shared.trailers.set(trailers);
        // The drop ends the body: the trailers were set before it.
    }

    /// Ends the body as broken: chunks still queued are dropped, and the
    /// client learns that the response is incomplete (HTTP/1.1: the
    /// connection closes without the last chunk; HTTP/2: RST_STREAM;
    /// HTTP/3: the stream is reset).
    pub fn abort(self) {
        self.end(End::Aborted);
    }

    fn end(&self, end: End) {
        let shared = &*self.shared;
        let mut state = shared.lock();
        if state.end != End::Open {
            return;
        }
        state.end = end;
        if end == End::Aborted {
            shared.clear(&mut state);
        } else {
            let _ = shared.finished_at.set(std::time::Instant::now());
        }
        let wake = take_wake(shared, &mut state);
        drop(state);
        post(wake);
    }
}

impl Drop for Sender {
    fn drop(&mut self) {
        self.end(End::Finished);
    }
}

/// Whether a chunk of `len` bytes may be queued now: within the capacity,
/// or alone (a chunk larger than the capacity waits for an empty queue).
fn fits(state: &State, capacity: usize, len: usize) -> bool {
    state.bytes == 0 || state.bytes + len <= capacity
}

fn push(shared: &Shared, state: &mut State, chunk: Vec<u8>) -> Option<(Arc<Mailbox>, usize)> {
    shared.count(chunk.len(), true);
    state.push(chunk);
    take_wake(shared, state)
}

impl fmt::Debug for Sender {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sender").finish_non_exhaustive()
    }
}

impl fmt::Display for SendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the response's client is gone")
    }
}

impl std::error::Error for SendError {}

impl fmt::Display for TrySendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TrySendError::Full(_) => f.write_str("the response's queue is full"),
            TrySendError::Closed(_) => f.write_str("the response's client is gone"),
        }
    }
}

impl std::error::Error for TrySendError {}

/// Watches a channel body's end from beside it (the access log, which
/// outlives the body it times).
pub(crate) struct EndWatch(Arc<Shared>);

impl EndWatch {
    /// When the sender ended the body normally, if it has.
    pub(crate) fn finished_at(&self) -> Option<std::time::Instant> {
        self.0.finished_at.get().copied()
    }

    /// The body's bytes the connection has taken to send so far.
    pub(crate) fn taken(&self) -> u64 {
        self.0.taken.load(Ordering::Relaxed)
    }
}

impl ChannelBody {
    /// A watch on this body's end.
    pub(crate) fn end_watch(&self) -> EndWatch {
        EndWatch(self.shared.clone())
    }

    /// The body's length, if its head says it.
    pub(crate) fn length(&self) -> Option<u64> {
        self.length
    }

    /// The trailer fields the sender ended the body with (read once the
    /// body's end was seen), if any.
    pub(crate) fn trailers(&self) -> Option<&Trailers> {
        self.shared.trailers.get().filter(|t| !t.is_empty())
    }

    /// Tells the body where to wake the connection that sends it: the
    /// worker's mailbox and the connection's token.
    pub(crate) fn bind(&self, mailbox: &Arc<Mailbox>, token: usize) {
        self.shared.lock().wake = Some((mailbox.clone(), token));
    }

    /// The next chunk, or why there is none now. `Wait` parks the body:
    /// the sender's next move wakes the connection.
    fn poll(&mut self) -> Next {
        let shared = &*self.shared;
        let mut state = shared.lock();
        if let Some(chunk) = state.pop() {
            shared.count(chunk.len(), false);
            shared.taken.fetch_add(chunk.len() as u64, Ordering::Relaxed);
            let producer = if state.bytes <= shared.queue.capacity / 2 {
                state.loop_waiter.take()
            } else {
                None
            };
            let sleeping = state.sleepers > 0;
            drop(state);
            shared.queue.notify(sleeping);
            post(producer);
            return Next::Chunk(chunk);
        }
        match state.end {
            End::Finished => Next::End,
            End::Aborted => Next::Failed,
            End::Open => {
                state.waiting = true;
                shared.parked.store(true, Ordering::Release);
                Next::Wait
            }
        }
    }
}

impl Drop for ChannelBody {
    fn drop(&mut self) {
        let mut state = self.shared.lock();
        state.gone = true;
        self.shared.clear(&mut state);
        state.wake = None;
        let producer = state.loop_waiter.take();
        let sleeping = state.sleepers > 0;
        drop(state);
        self.shared.queue.notify(sleeping);
        post(producer);
    }
}

impl fmt::Debug for ChannelBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChannelBody").finish_non_exhaustive()
    }
}

/// A body of unknown length as the connections send it: an iterator run
/// on the event loop, or a channel fed from another thread.
pub(crate) enum Chunks {
    Iter(Box<dyn Iterator<Item = Vec<u8>> + Send>),
    Channel(ChannelBody),
}

/// What `Chunks::next` found.
pub(crate) enum Next {
    Chunk(Vec<u8>),
    /// None now: the connection waits for a wake (channels only).
    Wait,
    /// The body is complete.
    End,
    /// The body cannot be completed (the iterator panicked, the sender
    /// aborted): the response must end as broken.
    Failed,
}

impl Chunks {
    pub(crate) fn next(&mut self) -> Next {
        match self {
            // The iterator is the application's code: a panic in it ends
            // this response, not the worker.
            Chunks::Iter(chunks) => match panic::catch_unwind(AssertUnwindSafe(|| chunks.next())) {
                Ok(Some(chunk)) => Next::Chunk(chunk),
                Ok(None) => Next::End,
                Err(_) => Next::Failed,
            },
            Chunks::Channel(rx) => rx.poll(),
        }
    }

    /// The trailer fields to send after the body's end, if any (a
    /// channel's; an iterator has none).
    pub(crate) fn trailers(&self) -> Option<&Trailers> {
        match self {
            Chunks::Iter(_) => None,
            Chunks::Channel(rx) => rx.trailers(),
        }
    }

    /// Waiting for its producer: polling it now would find nothing.
    pub(crate) fn is_parked(&self) -> bool {
        match self {
            Chunks::Iter(_) => false,
            Chunks::Channel(rx) => rx.shared.parked.load(Ordering::Acquire),
        }
    }
}

/// Makes `handler` read request bodies as they arrive: it is called as
/// soon as a request's head is complete (HTTP/1.1, HTTP/2 and HTTP/3
/// alike), with [`Request::body`] empty, and takes the body with
/// [`Request::body_reader`], a blocking [`std::io::Read`] to move to another
/// thread; it then answers through [`Request::defer`] once it has read
/// what it needs. Requests without a body are called as usual.
///
/// The connection reads the body only as fast as the reader takes it: it
/// stops reading from the socket (HTTP/1.1) or granting flow-control window
/// (HTTP/2, HTTP/3) while `BODY_READER_BYTES` (256 KiB) wait unread. The
/// body limit (`Limits::body_bytes_max`) still holds: a body that exceeds
/// it fails the reader (`InvalidData`) and the client gets 413. A client
/// that goes away fails it with `UnexpectedEof`. An answer sent before the
/// body's end ends the request: the rest of the body is not read (HTTP/1.1
/// closes the connection after the answer).
///
/// ```no_run
/// use std::io::Read;
/// use peregrine::{body, Reply, Request, Response, Router, Server};
///
/// let app = Router::new().post("/upload", body::streamed(|req: &Request<'_>| {
///     let mut reader = req.body_reader().expect("a body");
///     let responder = req.defer();
///     std::thread::spawn(move || {
///         let mut n = 0u64;
///         let mut buf = vec![0; 64 * 1024];
///         let answer = loop {
///             match reader.read(&mut buf) {
///                 Ok(0) => break Response::text(format!("{n} bytes\n")),
///                 Ok(got) => n += got as u64,
///                 Err(_) => break Response::error(400),
///             }
///         };
///         responder.send(answer);
///     });
///     Reply::Later
/// }));
/// Server::new().bind("127.0.0.1:8080").serve(app).unwrap();
/// ```
pub fn streamed<H: Handler>(handler: H) -> Streamed<H> {
    Streamed(handler)
}

/// A handler whose requests' bodies are read as they arrive: see
/// [`streamed`].
pub struct Streamed<H>(pub H);

impl<H: Handler> Handler for Streamed<H> {
    fn call(&self, req: &Request<'_>) -> Reply {
        self.0.call(req)
    }

    fn body_use(&self, _req: &Request<'_>) -> BodyUse {
        BodyUse::Stream
    }
}

/// A request body read as it arrives, from any thread (see [`streamed`]).
/// `read` blocks until bytes come; `Ok(0)` is the body's end. Errors:
/// `UnexpectedEof` if the client went away (or the connection closed)
/// before the end, `InvalidData` if the body broke the limit or its framing.
pub struct BodyReader {
    shared: Arc<Pipe>,
    chunk: Vec<u8>,
    pos: usize,
}

/// The event loop's end of a request body pipe, or of none: a body
/// nobody reads is discarded as it arrives (`BodySink::discard`).
pub(crate) struct BodySink {
    shared: Option<Arc<Pipe>>,
}

/// A request body pipe: its queue, and the trailer section the body
/// ended with (`BodySink::finish_with`), as a response channel keeps its
/// sender's (`Shared::trailers`).
struct Pipe {
    queue: Queue<PipeEnd>,
    /// Set before the end is, read after it: a request without trailers
    /// never fills it (no allocation).
    trailers: std::sync::OnceLock<Trailers>,
}

impl Pipe {
    fn lock(&self) -> MutexGuard<'_, Chunked<PipeEnd>> {
        self.queue.lock()
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum PipeEnd {
    Open,
    Complete,
    Failed(io::ErrorKind, &'static str),
}

/// A pipe for a request body: the reader for the handler, the sink for
/// the connection, `capacity` bytes queued at most before the connection
/// stops taking more.
pub(crate) fn pipe(capacity: usize) -> (BodyReader, BodySink) {
    let shared = Arc::new(Pipe {
        queue: Queue::new(capacity, PipeEnd::Open),
        trailers: std::sync::OnceLock::new(),
    });
    (
        BodyReader {
            shared: shared.clone(),
            chunk: Vec::new(),
            pos: 0,
        },
        BodySink { shared: Some(shared) },
    )
}

impl BodySink {
    /// A sink for a body nobody reads (`BodyUse::Ignore`): every byte
    /// pushed is dropped, and no flow-control window is given for it.
    pub(crate) fn discard() -> BodySink {
        BodySink { shared: None }
    }

    /// The body is thrown away, not read.
    pub(crate) fn is_discard(&self) -> bool {
        self.shared.is_none()
    }

    /// Where the reader wakes the connection when it makes room.
    pub(crate) fn bind(&self, mailbox: &Arc<Mailbox>, token: usize) {
        if let Some(shared) = &self.shared {
            shared.lock().wake = Some((mailbox.clone(), token));
        }
    }

    /// Bytes the connection may still hand over before the reader takes
    /// some (0: stop reading; the reader's next take wakes the connection).
    /// A reader gone, or none, takes everything (it is discarded).
    pub(crate) fn room(&self) -> usize {
        let Some(shared) = &self.shared else {
            return usize::MAX;
        };
        let mut state = shared.lock();
        if state.gone {
            return usize::MAX;
        }
        let room = shared.queue.capacity.saturating_sub(state.bytes);
        // Set here, cleared only by the reader's wake: clearing it when
        // room shows up again would lose the wake the connection waits for.
        if room == 0 {
            state.waiting = true;
        }
        room
    }

    /// The reader holds a client's `100 Continue` back
    /// ([`BodyReader::hold_continue`]).
    pub(crate) fn is_continue_held(&self) -> bool {
        self.shared.as_ref().is_some_and(|shared| shared.lock().continue_held)
    }

    /// The connection found no room and waits for the reader's wake.
    pub(crate) fn is_blocked(&self) -> bool {
        self.shared.as_ref().is_some_and(|shared| shared.lock().waiting)
    }

    /// Hands over body bytes (copied). Dropped if the reader is gone.
    pub(crate) fn push(&self, data: &[u8]) {
        let Some(shared) = &self.shared else { return };
        if data.is_empty() {
            return;
        }
        let mut state = shared.lock();
        if state.gone {
            return;
        }
        state.push(data.to_vec());
        let reader = state.loop_waiter.take();
        let sleeping = state.sleepers > 0;
        drop(state);
        shared.queue.notify(sleeping);
        post(reader);
    }

    /// The body is complete: the reader gets the end after what is queued.
    pub(crate) fn finish(self) {
        self.end(PipeEnd::Complete);
    }

    /// The body is complete and ended with `trailers` (the client's
    /// trailer section, if it sent one): the reader gets them with the
    /// end ([`BodyReader::trailers`]).
    pub(crate) fn finish_with(self, trailers: Option<Trailers>) {
        if let (Some(shared), Some(t)) = (&self.shared, trailers) {
            let _ = shared.trailers.set(t);
        }
        self.end(PipeEnd::Complete);
    }

    /// The body cannot be completed: the reader gets `kind` at once.
    pub(crate) fn fail(self, kind: io::ErrorKind, why: &'static str) {
        self.end(PipeEnd::Failed(kind, why));
    }

    fn end(&self, end: PipeEnd) {
        let Some(shared) = &self.shared else { return };
        let mut state = shared.lock();
        if state.end == PipeEnd::Open {
            state.end = end;
            if end != PipeEnd::Complete {
                state.clear();
            }
        }
        state.wake = None;
        let reader = state.loop_waiter.take();
        let sleeping = state.sleepers > 0;
        drop(state);
        shared.queue.notify(sleeping);
        post(reader);
    }
}

impl Drop for BodySink {
    /// Dropped before its end (the connection closed, the stream was
    /// reset): the reader learns that the body was cut short.
    fn drop(&mut self) {
        self.end(PipeEnd::Failed(
            io::ErrorKind::UnexpectedEof,
            "the request body was cut short",
        ));
    }
}

impl Read for BodyReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        if self.pos == self.chunk.len() {
            let shared = &*self.shared;
            let mut state = shared.lock();
            loop {
                if let Some(chunk) = state.pop() {
                    // Wake the connection once half the room is free, not
                    // per read.
                    let wake = if state.bytes <= shared.queue.capacity / 2 {
                        state.take_wake()
                    } else {
                        None
                    };
                    drop(state);
                    post(wake);
                    self.chunk = chunk;
                    self.pos = 0;
                    break;
                }
                match state.end {
                    PipeEnd::Open => state = shared.queue.wait(state),
                    PipeEnd::Complete => return Ok(0),
                    PipeEnd::Failed(kind, why) => return Err(io::Error::new(kind, why)),
                }
            }
        }
        let n = buf.len().min(self.chunk.len() - self.pos);
        buf[..n].copy_from_slice(&self.chunk[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

/// What [`BodyReader::try_take`] found.
pub(crate) enum Take {
    Chunk(Vec<u8>),
    /// Nothing now: the mailbox gets the token when something comes.
    Pending,
    End,
    Failed,
}

impl BodyReader {
    /// The trailer fields the client ended the body with (RFC 9110 §6.5:
    /// an HTTP/1.1 chunked body's trailer section, HTTP/2's and HTTP/3's
    /// trailing HEADERS), once `read` has returned the end (`Ok(0)`);
    /// `None` before, or if it sent none. The fields that may never be
    /// trailers (`Content-Length`, `Host`, `TE`, ...) are not among them.
    ///
    /// ```no_run
    /// use std::io::Read;
    /// use peregrine::{body, Reply, Request, Response, Router, Server};
    ///
    /// let app = Router::new().post("/upload", body::streamed(|req: &Request<'_>| {
    ///     let mut reader = req.body_reader().expect("a body");
    ///     let responder = req.defer();
    ///     std::thread::spawn(move || {
    ///         let mut body = Vec::new();
    ///         let answer = match reader.read_to_end(&mut body) {
    ///             Ok(_) => {
    ///                 let sum = reader.trailers().and_then(|t| t.field("x-checksum"));
    ///                 Response::text(format!("{} bytes, checksum {sum:?}\n", body.len()))
    ///             }
    ///             Err(_) => Response::error(400),
    ///         };
    ///         responder.send(answer);
    ///     });
    ///     Reply::Later
    /// }));
    /// Server::new().bind("127.0.0.1:8080").serve(app).unwrap();
    /// ```
    pub fn trailers(&self) -> Option<&Trailers> {
        // Set before the end under the lock; the end seen is what makes
        // them final.
        if self.shared.lock().end != PipeEnd::Complete {
            return None;
        }
        self.shared.trailers.get()
    }

    /// A client waiting for `100 Continue` is not sent it when this reader
    /// is taken: its taker relays an interim answer of its own (the
    /// proxy, its upstream's 100), or the client sends the body after its
    /// own wait (RFC 9110 §10.1.1). Call before the handler returns.
    pub(crate) fn hold_continue(&self) {
        self.shared.lock().continue_held = true;
    }

    /// The next bytes without blocking, for a reader on an event loop
    /// (the proxy's upstream connection): `Pending` posts `token` to
    /// `mailbox` when bytes or the end arrive.
    pub(crate) fn try_take(&mut self, mailbox: &Arc<Mailbox>, token: usize) -> Take {
        if self.pos < self.chunk.len() {
            let mut rest = std::mem::take(&mut self.chunk);
            rest.drain(..self.pos);
            self.pos = 0;
            return Take::Chunk(rest);
        }
        let shared = &*self.shared;
        let mut state = shared.lock();
        if let Some(chunk) = state.pop() {
            let wake = if state.bytes <= shared.queue.capacity / 2 {
                state.take_wake()
            } else {
                None
            };
            drop(state);
            post(wake);
            return Take::Chunk(chunk);
        }
        match state.end {
            PipeEnd::Open => {
                state.loop_waiter = Some((mailbox.clone(), token));
                Take::Pending
            }
            PipeEnd::Complete => Take::End,
            PipeEnd::Failed(..) => Take::Failed,
        }
    }
}

impl Drop for BodyReader {
    fn drop(&mut self) {
        let mut state = self.shared.lock();
        state.gone = true;
        state.clear();
        let wake = state.take_wake();
        drop(state);
        post(wake);
    }
}

impl fmt::Debug for BodyReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BodyReader").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rx(body: Body) -> Chunks {
        match body {
            Body::Channel(rx) => Chunks::Channel(rx),
            _ => unreachable!(),
        }
    }

    /// A held channel's queued bytes are in its count while they wait,
    /// and leave it as they are taken, or dropped by an abort or by the
    /// receiver's end (the proxy's read-ahead in the output budget).
    #[test]
    fn a_held_channels_queued_bytes_are_counted_until_taken_or_dropped() {
        let held = Arc::new(AtomicUsize::new(0));
        let count = || held.load(Ordering::Relaxed);
        let (body, tx) = channel_held(100, None, held.clone());
        let mut chunks = rx(body);
        tx.try_send(vec![1; 30]).unwrap();
        tx.try_send(vec![2; 20]).unwrap();
        assert_eq!(count(), 50);
        assert!(matches!(chunks.next(), Next::Chunk(c) if c.len() == 30));
        assert_eq!(count(), 20);
        tx.abort();
        assert_eq!(count(), 0, "an abort drops what was queued");
        assert!(matches!(chunks.next(), Next::Failed));

        let (body, tx) = channel_held(100, Some(10), held.clone());
        tx.try_send(vec![3; 10]).unwrap();
        assert_eq!(count(), 10);
        drop(body);
        assert_eq!(count(), 0, "the receiver's end drops what was queued");
        assert!(tx.try_send(vec![4; 1]).is_err());
        assert_eq!(count(), 0);
    }

    #[test]
    fn chunks_arrive_in_order_then_the_end() {
        let (body, tx) = channel(16);
        let mut rx = rx(body);
        assert!(matches!(rx.next(), Next::Wait));
        assert!(rx.is_parked());
        tx.send("ab").unwrap();
        assert!(!rx.is_parked());
        tx.send(Vec::new()).unwrap();
        tx.send("cd").unwrap();
        assert!(matches!(rx.next(), Next::Chunk(c) if c == b"ab"));
        assert!(matches!(rx.next(), Next::Chunk(c) if c == b"cd"));
        drop(tx);
        assert!(matches!(rx.next(), Next::End));
    }

    #[test]
    fn a_full_queue_refuses_try_send_and_blocks_send_until_taken() {
        let (body, tx) = channel(4);
        let mut rx = rx(body);
        tx.try_send("abc").unwrap();
        assert!(matches!(tx.try_send("de"), Err(TrySendError::Full(_))));
        let producer = std::thread::spawn(move || {
            tx.send("de").unwrap();
            tx
        });
        // The producer can only finish once the first chunk is taken.
        assert!(matches!(rx.next(), Next::Chunk(c) if c == b"abc"));
        let tx = producer.join().unwrap();
        assert!(matches!(rx.next(), Next::Chunk(c) if c == b"de"));
        // A chunk larger than the capacity passes alone.
        tx.send(vec![0; 10]).unwrap();
        assert!(matches!(tx.try_send("x"), Err(TrySendError::Full(_))));
    }

    #[test]
    fn a_dropped_receiver_fails_the_sender_even_while_blocked() {
        let (body, tx) = channel(1);
        tx.send("a").unwrap();
        let producer = std::thread::spawn(move || tx.send("b"));
        drop(body);
        assert!(producer.join().unwrap().is_err());
    }

    #[test]
    fn an_abort_drops_what_is_queued_and_fails_the_body() {
        let (body, tx) = channel(16);
        let mut rx = rx(body);
        tx.send("a").unwrap();
        tx.abort();
        assert!(matches!(rx.next(), Next::Failed));
    }

    #[test]
    fn a_body_pipe_passes_bytes_then_the_end_or_the_error() {
        let (mut reader, sink) = pipe(8);
        assert_eq!(sink.room(), 8);
        sink.push(b"hello");
        assert_eq!(sink.room(), 3);
        sink.push(b"abc");
        assert_eq!(sink.room(), 0);
        let mut buf = [0; 4];
        assert_eq!(reader.read(&mut buf).unwrap(), 4);
        assert_eq!(reader.read(&mut buf).unwrap(), 1);
        sink.finish();
        let mut rest = Vec::new();
        reader.read_to_end(&mut rest).unwrap();
        assert_eq!(rest, b"abc");

        let (mut reader, sink) = pipe(8);
        sink.push(b"x");
        sink.fail(io::ErrorKind::InvalidData, "too large");
        assert_eq!(reader.read(&mut buf).unwrap_err().kind(), io::ErrorKind::InvalidData);

        // The connection found the pipe full: it stays blocked (no body
        // timeout, waiting for the wake) until the reader has taken half,
        // however often it looks at the room meanwhile (a regression: the
        // look cleared the flag, the wake never came, and a 64 MiB upload
        // stalled into the body timeout).
        let (mut reader, sink) = pipe(9);
        for part in [b"abc", b"def", b"ghi"] {
            sink.push(part);
        }
        assert_eq!(sink.room(), 0);
        assert!(sink.is_blocked());
        assert_eq!(reader.read(&mut [0; 3]).unwrap(), 3);
        assert_eq!(sink.room(), 3);
        assert!(sink.is_blocked(), "room seen again must not cancel the wake");
        assert_eq!(reader.read(&mut [0; 3]).unwrap(), 3);
        assert!(!sink.is_blocked(), "the reader took half: the wake is posted");

        // Trailers come with the end, never before it.
        let (mut reader, sink) = pipe(8);
        sink.push(b"ab");
        assert!(reader.trailers().is_none());
        let t = Trailers::new(&[("x-sum", "3")]).unwrap();
        sink.finish_with(Some(t.clone()));
        let mut all = Vec::new();
        reader.read_to_end(&mut all).unwrap();
        assert_eq!((&all[..], reader.trailers()), (&b"ab"[..], Some(&t)));
        let (reader, sink) = pipe(8);
        sink.finish_with(None);
        assert!(reader.trailers().is_none());

        let (mut reader, sink) = pipe(8);
        let blocked = std::thread::spawn(move || reader.read(&mut [0; 4]).map_err(|e| e.kind()));
        drop(sink);
        assert_eq!(blocked.join().unwrap(), Err(io::ErrorKind::UnexpectedEof));
    }
}
