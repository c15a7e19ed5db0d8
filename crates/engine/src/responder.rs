//! Answers from other threads. A handler that must wait (a database, an
//! upstream) calls [`crate::Request::defer`], returns [`crate::Reply::Later`],
//! and later sends the response through the [`Responder`] from any thread.
//! The answer goes to the worker's mailbox and a `mio::Waker` wakes its loop;
//! the loop never blocks on the handler.

use std::sync::{Arc, Mutex};

use crate::response::Response;

/// A worker's inbox of answers, and the waker that interrupts its `poll`.
pub(crate) struct Mailbox {
    pub(crate) answers: Mutex<Vec<Post>>,
    pub(crate) waker: mio::Waker,
}

/// What another thread tells a worker.
pub(crate) enum Post {
    /// A deferred answer.
    Answer(Answer),
    /// A streamed body (`body::channel`) of the connection `token` has
    /// something new: a chunk, its end, its abort.
    Wake { token: usize },
    /// A message published to a WebSocket topic (`ws::hub`): every
    /// worker's subscribers get its frame.
    Publish(Arc<crate::ws::hub::Published>),
}

/// One deferred answer, addressed to a connection and the request it is for.
pub(crate) struct Answer {
    pub(crate) token: usize,
    pub(crate) id: u64,
    pub(crate) response: Response,
}

impl Mailbox {
    pub(crate) fn post(&self, answer: Post) {
        // A poisoned lock only means another sender panicked mid-push; the
        // vector itself is still sound.
        let mut answers = self.answers.lock().unwrap_or_else(|e| e.into_inner());
        let was_empty = answers.is_empty();
        answers.push(answer);
        drop(answers);
        if was_empty {
            // If waking fails the worker is gone, and so is the connection.
            let _ = self.waker.wake();
        }
    }

    pub(crate) fn take(&self) -> Vec<Post> {
        std::mem::take(&mut *self.answers.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// Sends the answer to a deferred request from any thread.
///
/// Dropping a `Responder` without sending answers the request with a
/// `500 Internal Server Error`, so a client is never left hanging.
#[must_use = "a dropped Responder answers 500"]
pub struct Responder {
    mailbox: Option<Arc<Mailbox>>,
    token: usize,
    id: u64,
}

impl Responder {
    pub(crate) fn new(mailbox: Option<Arc<Mailbox>>, token: usize, id: u64) -> Self {
        Responder { mailbox, token, id }
    }

    /// Sends the response. If the client has gone meanwhile it is dropped.
    pub fn send(mut self, response: Response) {
        if let Some(mailbox) = self.mailbox.take() {
            if let crate::Body::Channel(rx) = &response.body {
                rx.bind(&mailbox, self.token);
            }
            mailbox.post(Post::Answer(Answer {
                token: self.token,
                id: self.id,
                response,
            }));
        }
    }
}

impl Responder {
    /// The connection token and request id the answer is for.
    pub(crate) fn key(&self) -> (usize, u64) {
        (self.token, self.id)
    }

    /// The connection token and request id the answer is for, the
    /// responder disarmed: for an answer made on the worker that owns the
    /// connection (the proxy's), handed over without the mailbox.
    pub(crate) fn into_parts(mut self) -> (usize, u64) {
        self.mailbox = None;
        (self.token, self.id)
    }
}

impl Drop for Responder {
    fn drop(&mut self) {
        if let Some(mailbox) = self.mailbox.take() {
            mailbox.post(Post::Answer(Answer {
                token: self.token,
                id: self.id,
                response: Response::error(500),
            }));
        }
    }
}

impl std::fmt::Debug for Responder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Responder")
            .field("token", &self.token)
            .field("id", &self.id)
            .finish()
    }
}
