//! The handler API: one function from a request to a reply, as in Woo.

use crate::request::Request;
use crate::response::Response;

/// What a handler returns: a response now, or a promise of one later.
/// More may come (an upgrade to another protocol): match with a `_` arm.
#[derive(Debug)]
#[non_exhaustive]
pub enum Reply {
    /// The response, to be sent at once.
    Now(Response),
    /// The handler called [`Request::defer`] and will send the response
    /// through the [`crate::Responder`]. Returning `Later` without having
    /// deferred is a bug, answered with a 500.
    Later,
    /// The request's connection becomes a WebSocket ([`crate::ws::upgrade`]
    /// makes this after checking the handshake).
    Upgrade(crate::ws::Upgrade),
}

impl From<Response> for Reply {
    fn from(r: Response) -> Self {
        Reply::Now(r)
    }
}

/// Anything that answers requests. Implemented for every
/// `Fn(&Request) -> impl Into<Reply>` closure that is `Send + Sync`, and by
/// [`crate::Router`].
///
/// ```
/// use peregrine::{Request, Response};
/// fn hello(_req: &Request<'_>) -> Response {
///     Response::text("Hello, World!")
/// }
/// # let _: &dyn peregrine::Handler = &hello;
/// ```
///
/// Handlers run on the event loop: a handler that would block must
/// [`Request::defer`] instead. A handler that panics gets its client a 500
/// and a closed connection; the worker carries on (this needs the default
/// `panic = "unwind"`). A streamed body whose iterator panics ends its
/// connection the same way.
pub trait Handler: Send + Sync + 'static {
    /// Answers one request.
    fn call(&self, req: &Request<'_>) -> Reply;

    /// What this handler does with `req`'s body: asked once, when a
    /// request announcing a body has its head complete (`req.body()` is
    /// empty then). [`BodyUse::Buffer`] unless the handler says otherwise:
    /// [`crate::body::streamed`] reads it as it arrives, a
    /// [`crate::Router`] asks the route the request goes to (and ignores
    /// it for `GET`/`HEAD` routes, 404 and 405), the file and archive
    /// servers ignore every body.
    fn body_use(&self, _req: &Request<'_>) -> BodyUse {
        BodyUse::Buffer
    }

    /// Whether this handler answers `req`, whose method is not in IANA's
    /// HTTP Method Registry (`PURGE`, `BAN`, a custom token): asked only
    /// for such a request, before [`Handler::body_use`] and
    /// [`Handler::call`]. `false` unless the handler says otherwise: the
    /// engine answers 501 itself (RFC 9110 §9.1: "An origin server that
    /// receives a request method that is unrecognized or not implemented
    /// SHOULD respond with the 501 (Not Implemented) status code"), so a
    /// handler written for the methods it knows never mistakes one for
    /// `GET`. The reverse proxy says yes (a proxy forwards what it does
    /// not know); a [`crate::Router`] asks the route for that very method,
    /// if the path has one. A handler that wraps another asks it.
    fn takes_unknown_method(&self, _req: &Request<'_>) -> bool {
        false
    }
}

/// What a handler does with a request's body ([`Handler::body_use`]).
///
/// A body nobody reads must not cost memory or delay the answer: a
/// handler that ignores bodies is called as soon as the head is complete,
/// and the body is read and thrown away (HTTP/1.1, at most
/// `Limits::discard_bytes_max`, else the connection closes after the
/// answer, as nginx does) or refused with `RST_STREAM(NO_ERROR)` /
/// `STOP_SENDING(H3_NO_ERROR)` once the answer is sent (RFC 9113 §8.1,
/// RFC 9114 §4.1).
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyUse {
    /// The body is buffered whole (up to `Limits::body_bytes_max`, within
    /// the worker's `Limits::body_budget_bytes`) and the handler called
    /// once it is complete: [`Request::body`].
    Buffer,
    /// The handler is called at once and reads the body as it arrives
    /// ([`Request::body_reader`]).
    Stream,
    /// The handler is called at once with an empty body; the body is
    /// discarded.
    Ignore,
}

impl<F, R> Handler for F
where
    F: Fn(&Request<'_>) -> R + Send + Sync + 'static,
    R: Into<Reply>,
{
    fn call(&self, req: &Request<'_>) -> Reply {
        self(req).into()
    }
}
