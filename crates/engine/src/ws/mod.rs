//! WebSocket (RFC 6455), over HTTP/1.1 and over HTTP/2 (RFC 8441's
//! extended CONNECT, with [`crate::Server::websockets`]), on the
//! worker's own event loop; the same handler accepts both.
//!
//! A handler accepts an upgrade with [`upgrade`], giving the application's
//! [`WebSocket`]: its callbacks run on the worker's loop (like handlers:
//! they must not block), with a [`Socket`] to send, close, subscribe and
//! publish. No thread per connection, no async runtime. Work that must
//! wait goes to another thread with a [`Sender`] ([`Socket::sender`]),
//! which is `Send`, bounded in bytes, and blocks (or says
//! [`SendError::Full`]) while the client reads slowly.
//!
//! ```no_run
//! use peregrine::{ws, Request, Reply, Server};
//!
//! let options = ws::Options::new();
//! Server::new().bind("127.0.0.1:8080").websockets(true).serve(move |req: &Request<'_>| -> Reply {
//!     ws::upgrade(req, &options, |ws: &mut ws::Socket<'_>, msg: ws::Message<'_>| {
//!         let _ = ws.send(msg); // echo
//!     })
//! }).unwrap();
//! ```
//!
//! **Publish/subscribe**: [`Socket::subscribe`] a topic, then
//! [`Socket::publish`] (or [`Publisher::publish`] from any thread) frames a
//! message once and hands it to every worker through its mailbox, where
//! each subscribed connection gets a copy of the frame (as uWebSockets
//! and facil.io do): no lock is shared between connections.
//!
//! **Bounds**: a message is at most [`Options::message_bytes_max`] (1 MiB:
//! 1009 past it) in at most [`Options::fragments_max`] (1,024) frames; what waits to be sent to a
//! client is at most [`Options::backpressure_bytes_max`] (1 MiB): past it
//! [`Socket::send`] says `Full`, a published message is dropped for that
//! client, and the socket is not read until the client takes some, so a
//! client that sends without reading cannot make the server hold more.
//! The engine answers pings, pings a silent client every 30 s and drops it
//! after two unanswered, ends a message whose fragments stop coming after
//! `Limits::body_timeout`, and waits at most 5 s for the client's Close.
//! A callback that panics closes its connection with 1011.
//!
//! **Compression**: with [`Options::permessage_deflate`], a client that
//! offers permessage-deflate (RFC 7692) gets it, with
//! `server_no_context_takeover` and `client_no_context_takeover`: each
//! message is compressed and inflated on its own by the worker's one
//! stream (uWebSockets' shared compressor and decompressor), so an idle
//! WebSocket costs no more with compression than without. A message is
//! sent compressed when that makes it shorter ([`Socket::send`]; a
//! [`Sender`]'s and a published message go as they are), and the size a
//! message inflates to is held to [`Options::message_bytes_max`] like any
//! other's.
//!
//! A server shutting down or reloading sends each WebSocket a Close 1001
//! (going away) at a random moment within the first half of
//! `Limits::shutdown_timeout`, so clients reconnect early and not all at
//! once.

use std::sync::Arc;
use std::time::Duration;

pub(crate) mod deflate;
pub(crate) mod frame;
pub(crate) mod handshake;
pub(crate) mod hub;
pub(crate) mod session;

pub use hub::Publisher;

use crate::handler::Reply;
use crate::request::Request;

/// A WebSocket connection's application: its callbacks run on the
/// worker's event loop, one at a time, and must not block.
///
/// A closure `FnMut(&mut Socket<'_>, Message<'_>)` is one (its messages
/// only).
pub trait WebSocket: Send + 'static {
    /// The handshake is done: the first message may be sent.
    fn on_open(&mut self, _ws: &mut Socket<'_>) {}
    /// A whole message from the client.
    fn on_message(&mut self, ws: &mut Socket<'_>, msg: Message<'_>);
    /// The WebSocket ended: the client's close code and reason (1005 if
    /// it gave none), ours after a protocol error (1002, 1007, 1009...),
    /// or 1006 if the connection ended without a Close. Called once.
    fn on_close(&mut self, _code: u16, _reason: &str) {}
}

impl<F> WebSocket for F
where
    F: FnMut(&mut Socket<'_>, Message<'_>) + Send + 'static,
{
    fn on_message(&mut self, ws: &mut Socket<'_>, msg: Message<'_>) {
        self(ws, msg)
    }
}

/// A message: text (valid UTF-8) or binary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Message<'a> {
    /// A text message.
    Text(&'a str),
    /// A binary message.
    Binary(&'a [u8]),
}

impl<'a> Message<'a> {
    /// The payload's bytes.
    pub fn as_bytes(&self) -> &'a [u8] {
        match self {
            Message::Text(s) => s.as_bytes(),
            Message::Binary(b) => b,
        }
    }

    fn kind(&self) -> session::Kind {
        match self {
            Message::Text(_) => session::Kind::Text,
            Message::Binary(_) => session::Kind::Binary,
        }
    }
}

/// Why a message was not queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendError {
    /// The client has [`Options::backpressure_bytes_max`] waiting already:
    /// try later (or, with [`Options::close_on_backpressure`], the
    /// connection is closing with 1008).
    Full,
    /// The WebSocket is closing or closed.
    Closed,
}

impl std::fmt::Display for SendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SendError::Full => "the client's send queue is full",
            SendError::Closed => "the WebSocket is closed",
        })
    }
}

impl std::error::Error for SendError {}

/// What a WebSocket route accepts: subprotocols, cross-origin pages, and
/// its bounds. Cheap to clone; build it once, outside the handler.
#[derive(Clone, Debug)]
pub struct Options {
    pub(crate) protocols: Vec<String>,
    pub(crate) origins: Vec<String>,
    pub(crate) message_bytes_max: usize,
    pub(crate) fragments_max: u32,
    pub(crate) backpressure_bytes_max: usize,
    pub(crate) close_on_backpressure: bool,
    pub(crate) ping_interval: Option<Duration>,
    pub(crate) deflate: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options::new()
    }
}

impl Options {
    /// The defaults: no subprotocol, same-origin pages only, messages up
    /// to 1 MiB, 1 MiB waiting per client, a ping after 30 s of silence.
    pub fn new() -> Self {
        Options {
            protocols: Vec::new(),
            origins: Vec::new(),
            message_bytes_max: 1024 * 1024,
            fragments_max: 1024,
            backpressure_bytes_max: 1024 * 1024,
            close_on_backpressure: false,
            ping_interval: Some(Duration::from_secs(30)),
            deflate: false,
        }
    }

    /// A subprotocol this route speaks (`Sec-WebSocket-Protocol`): the
    /// first the client offers that the route speaks is chosen; none if
    /// none matches (the client decides whether to go on).
    pub fn protocol(mut self, name: impl Into<String>) -> Self {
        self.protocols.push(name.into());
        self
    }

    /// A page origin (`https://app.example.com`, scheme://host[:port]) that
    /// may open this WebSocket although it differs from the request's own;
    /// `*` allows every origin. Browsers send `Origin`; a cross-origin
    /// upgrade not allowed here gets 403, as coder/websocket and gorilla
    /// do by default. CORS settings do not apply to WebSockets.
    pub fn allow_origin(mut self, origin: impl Into<String>) -> Self {
        self.origins.push(origin.into());
        self
    }

    /// The largest message accepted, in bytes (1009 past it).
    pub fn message_bytes_max(mut self, bytes: usize) -> Self {
        self.message_bytes_max = bytes;
        self
    }

    /// The most frames one message may come in (1,024 by default; 1009
    /// past it): many tiny fragments cost a frame head's work each.
    pub fn fragments_max(mut self, n: u32) -> Self {
        self.fragments_max = n.max(1);
        self
    }

    /// What may wait to be sent to one client (uWebSockets'
    /// `maxBackpressure`).
    pub fn backpressure_bytes_max(mut self, bytes: usize) -> Self {
        self.backpressure_bytes_max = bytes.max(1);
        self
    }

    /// Close with 1008 a client whose queue is full when a message is
    /// sent or published to it, instead of refusing that message.
    pub fn close_on_backpressure(mut self, yes: bool) -> Self {
        self.close_on_backpressure = yes;
        self
    }

    /// Accept permessage-deflate (RFC 7692) from clients that offer it
    /// (off by default, as in uWebSockets): messages compressed by the
    /// worker's shared streams, no context kept between messages, so no
    /// memory per connection. An offer asking for a window under 512
    /// bytes (`server_max_window_bits=8`, which zlib cannot make) is
    /// declined, and the WebSocket goes on uncompressed.
    pub fn permessage_deflate(mut self, yes: bool) -> Self {
        self.deflate = yes;
        self
    }

    /// How long a client may stay silent before it is pinged (`None`:
    /// never; two unanswered pings close it).
    pub fn ping_interval(mut self, interval: Option<Duration>) -> Self {
        self.ping_interval = interval;
        self
    }
}

/// Accepts `req`'s WebSocket handshake with `app` as its application, or
/// answers why not: 426 (with `Sec-WebSocket-Version: 13`, or `Upgrade:
/// websocket`) for a request that does not offer WebSocket version 13,
/// 400 for a malformed handshake, 403 for a cross-origin page `options`
/// does not allow.
pub fn upgrade(req: &Request<'_>, options: &Options, app: impl WebSocket) -> Reply {
    match handshake::check(req, options) {
        Ok(accepted) => Reply::Upgrade(Upgrade(Box::new(Accepted {
            handshake: accepted,
            options: options.clone(),
            app: Box::new(app),
        }))),
        Err(response) => Reply::Now(response),
    }
}

/// An accepted WebSocket handshake, returned by a handler as
/// [`Reply::Upgrade`] (made by [`upgrade`]).
pub struct Upgrade(pub(crate) Box<Accepted>);

impl std::fmt::Debug for Upgrade {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upgrade")
            .field("protocol", &self.0.handshake.protocol)
            .finish_non_exhaustive()
    }
}

pub(crate) struct Accepted {
    pub(crate) handshake: handshake::Accept,
    pub(crate) options: Options,
    pub(crate) app: Box<dyn WebSocket>,
}

/// The loop-side handle of a WebSocket, lent to its callbacks.
pub struct Socket<'s> {
    pub(crate) out: &'s mut Vec<u8>,
    /// Bytes of `out` already sent (so `out.len() - sent` wait).
    pub(crate) sent: usize,
    pub(crate) open: bool,
    pub(crate) limit: usize,
    pub(crate) close_on_backpressure: bool,
    /// A close the callback asked for, applied after it returns.
    pub(crate) close: &'s mut Option<(u16, String)>,
    pub(crate) conn: &'s mut hub::Subscriber,
    pub(crate) local: &'s mut hub::Local,
    pub(crate) protocol: Option<&'s str>,
    pub(crate) messages_out: u64,
    /// permessage-deflate's terms, if agreed: messages go compressed.
    pub(crate) deflate: Option<deflate::Params>,
}

impl Socket<'_> {
    /// Queues a message for the client. `Full` while
    /// [`Options::backpressure_bytes_max`] bytes wait already.
    pub fn send(&mut self, msg: Message<'_>) -> Result<(), SendError> {
        if !self.open || self.close.is_some() {
            return Err(SendError::Closed);
        }
        if self.buffered_amount() > self.limit {
            if self.close_on_backpressure {
                *self.close = Some((1008, "the client reads too slowly".into()));
            }
            return Err(SendError::Full);
        }
        match self.deflate {
            Some(params) => deflate::write_message(self.out, msg.kind().op(), msg.as_bytes(), params),
            None => frame::write(self.out, msg.kind().op(), msg.as_bytes()),
        }
        self.messages_out += 1;
        Ok(())
    }

    /// Queues a text message.
    pub fn send_text(&mut self, text: &str) -> Result<(), SendError> {
        self.send(Message::Text(text))
    }

    /// Queues a binary message.
    pub fn send_binary(&mut self, bytes: &[u8]) -> Result<(), SendError> {
        self.send(Message::Binary(bytes))
    }

    /// Starts the closing handshake with `code` (1000 for a normal close;
    /// 3000-4999 for applications) and `reason` (cut to 123 bytes).
    pub fn close(&mut self, code: u16, reason: &str) {
        if self.open && self.close.is_none() {
            *self.close = Some((code, reason.to_owned()));
        }
    }

    /// Bytes queued for the client and not yet sent.
    pub fn buffered_amount(&self) -> usize {
        self.out.len().saturating_sub(self.sent)
    }

    /// The subprotocol chosen in the handshake, if any.
    pub fn protocol(&self) -> Option<&str> {
        self.protocol
    }

    /// Receives what is published to `topic` (on any worker) from now on.
    pub fn subscribe(&mut self, topic: &str) {
        self.local.subscribe(self.conn, topic);
    }

    /// Stops receiving `topic`.
    pub fn unsubscribe(&mut self, topic: &str) {
        self.local.unsubscribe(self.conn, topic);
    }

    /// Whether this connection receives `topic`.
    pub fn is_subscribed(&self, topic: &str) -> bool {
        self.conn.topics.iter().any(|t| &**t == topic)
    }

    /// Sends `msg` to every subscriber of `topic` on every worker, except
    /// this connection (as uWebSockets' `ws.publish`); framed once.
    pub fn publish(&mut self, topic: &str, msg: Message<'_>) {
        self.local.publish(topic, msg, Some(self.conn.member()));
    }

    /// A handle to publish from any thread.
    pub fn publisher(&self) -> Publisher {
        self.local.publisher()
    }

    /// A sender for this connection, usable from any thread; its queue is
    /// bounded by [`Options::backpressure_bytes_max`]. All senders of a
    /// connection share one queue.
    pub fn sender(&mut self) -> Sender {
        Sender {
            inner: self.conn.sender(self.limit, self.local),
        }
    }
}

/// Sends to one WebSocket from any thread ([`Socket::sender`]). Clones
/// share one queue, bounded in bytes: [`Sender::send`] blocks while it is
/// full, [`Sender::try_send`] says [`SendError::Full`]; both say
/// [`SendError::Closed`] once the connection is gone.
#[derive(Clone)]
pub struct Sender {
    pub(crate) inner: Arc<crate::body::Sender>,
}

impl Sender {
    /// Queues `msg`, waiting while the queue is full.
    pub fn send(&self, msg: Message<'_>) -> Result<(), SendError> {
        self.inner.send(framed(msg)).map_err(|_| SendError::Closed)
    }

    /// Queues `msg` if there is room now.
    pub fn try_send(&self, msg: Message<'_>) -> Result<(), SendError> {
        self.inner.try_send(framed(msg)).map_err(|e| match e {
            crate::body::TrySendError::Full(_) => SendError::Full,
            crate::body::TrySendError::Closed(_) => SendError::Closed,
        })
    }

    /// Starts the closing handshake from another thread.
    pub fn close(&self, code: u16, reason: &str) -> Result<(), SendError> {
        let mut out = Vec::with_capacity(4 + reason.len());
        session::write_close(&mut out, code, reason);
        self.inner.send(out).map_err(|_| SendError::Closed)
    }

    /// The connection is gone: nothing sent will arrive.
    pub fn is_closed(&self) -> bool {
        self.inner.is_closed()
    }
}

impl std::fmt::Debug for Sender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sender").finish_non_exhaustive()
    }
}

/// `msg` as one unmasked frame.
pub(crate) fn framed(msg: Message<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    frame::write(&mut out, msg.kind().op(), msg.as_bytes());
    out
}

#[cfg(test)]
mod tests;
