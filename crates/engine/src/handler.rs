//! The handler API: one function from a request to a reply, as in Woo.

use crate::request::Request;
use crate::response::Response;

/// What a handler returns: a response now, or a promise of one later.
#[derive(Debug)]
pub enum Reply {
    /// The response, to be sent at once.
    Now(Response),
    /// The handler called [`Request::defer`] and will send the response
    /// through the [`crate::Responder`]. Returning `Later` without having
    /// deferred is a bug, answered with a 500.
    Later,
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

    /// Whether `req`'s body is to be read as it arrives
    /// ([`Request::body_reader`]) rather than buffered whole: asked when a
    /// request with a body has its head complete (`req.body()` is empty
    /// then). False unless the handler is wrapped in
    /// [`crate::body::streamed`]; a [`crate::Router`] asks the route the
    /// request goes to.
    fn streams_body(&self, _req: &Request<'_>) -> bool {
        false
    }
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
