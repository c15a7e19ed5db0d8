//! Answers from other threads. A handler that must wait (a database, an
//! upstream) calls [`crate::Request::defer`], returns [`crate::Reply::Later`],
//! and later sends the response through the [`Responder`] from any thread.
//! The answer goes to the worker's mailbox and a `mio::Waker` wakes its loop;
//! the loop never blocks on the handler.
//!
//! A responder made for an answer that is made and handed over on the
//! worker's own thread (the proxy's, `Request::defer_here`) holds no
//! count on the mailbox: it is reached through the thread's `HERE` only if
//! the responder is sent or dropped unsent, never on the usual path
//! (`into_parts`).

use std::cell::RefCell;
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

thread_local! {
    /// The mailbox of the worker that runs on this thread (`Worker::run`
    /// sets it): where a same-thread responder (`Route::Here`) posts, if
    /// it is sent or dropped unsent.
    static HERE: RefCell<Option<Arc<Mailbox>>> = const { RefCell::new(None) };
}

/// Makes `mailbox` this thread's, for the same-thread responders made on
/// it (`Request::defer_here`).
pub(crate) fn set_here(mailbox: &Arc<Mailbox>) {
    HERE.with_borrow_mut(|here| *here = Some(mailbox.clone()));
}

/// Where a responder's answer goes.
enum Route {
    /// Nowhere: a request outside a running server, a forward-auth
    /// subrequest's, or a responder already taken apart (`into_parts`).
    Nowhere,
    /// The worker's mailbox, from any thread.
    Mailbox(Arc<Mailbox>),
    /// The mailbox of the worker running on this thread (`HERE`): a
    /// responder that never leaves the worker that owns its connection
    /// (the proxy's jobs: their answers are handed over directly,
    /// `into_parts`). It holds no count on the mailbox: the `Arc`'s
    /// clone and its drop were two atomic operations and a call, about
    /// 40 instructions of a proxied GET (callgrind `proxy-c50`).
    Here,
}

/// Sends the answer to a deferred request from any thread.
///
/// Dropping a `Responder` without sending answers the request with a
/// `500 Internal Server Error`, so a client is never left hanging.
#[must_use = "a dropped Responder answers 500"]
pub struct Responder {
    route: Route,
    token: usize,
    id: u64,
}

impl Responder {
    pub(crate) fn new(mailbox: Option<Arc<Mailbox>>, token: usize, id: u64) -> Self {
        let route = match mailbox {
            Some(m) => Route::Mailbox(m),
            None => Route::Nowhere,
        };
        Responder { route, token, id }
    }

    /// A responder for an answer made on this worker's thread, for its
    /// own connection `token` (`Request::defer_here`): it must not leave
    /// the thread (were it sent or dropped on another, its answer would
    /// go to that thread's worker, or nowhere).
    pub(crate) fn here(token: usize, id: u64) -> Self {
        Responder {
            route: Route::Here,
            token,
            id,
        }
    }

    /// Sends the response. If the client has gone meanwhile it is dropped.
    pub fn send(mut self, response: Response) {
        let answer = Answer {
            token: self.token,
            id: self.id,
            response,
        };
        match std::mem::replace(&mut self.route, Route::Nowhere) {
            Route::Nowhere => {}
            Route::Mailbox(mailbox) => post_to(&mailbox, answer),
            Route::Here => post_here(answer),
        }
    }
}

/// Posts `answer` to `mailbox`, its channel body (if any) bound to it.
fn post_to(mailbox: &Arc<Mailbox>, answer: Answer) {
    if let crate::Body::Channel(rx) = &answer.response.body {
        rx.bind(mailbox, answer.token);
    }
    mailbox.post(Post::Answer(answer));
}

/// Posts `answer` to the mailbox of this thread's worker. Rare: a
/// same-thread responder's answer is handed over without the mailbox
/// (`into_parts`); this is for one sent, or dropped unsent (a 500).
#[cold]
#[inline(never)]
fn post_here(answer: Answer) {
    // `try_with`: a responder dropped while the thread's locals are torn
    // down has no worker left to answer through.
    let posted = HERE.try_with(|here| match &*here.borrow() {
        Some(mailbox) => {
            post_to(mailbox, answer);
            true
        }
        None => false,
    });
    debug_assert!(
        posted != Ok(false),
        "a same-thread responder used off its worker's thread"
    );
}

impl Responder {
    /// The connection token and request id the answer is for.
    pub(crate) fn key(&self) -> (usize, u64) {
        (self.token, self.id)
    }

    /// The connection token and request id the answer is for, the
    /// responder disarmed: for an answer made on the worker that owns the
    /// connection (the proxy's), handed over without the mailbox.
    #[inline(always)]
    pub(crate) fn into_parts(mut self) -> (usize, u64) {
        let parts = (self.token, self.id);
        match self.route {
            // Its `Arc` let go; then its drop does nothing.
            Route::Mailbox(_) => self.route = Route::Nowhere,
            // Nothing held: forgotten, not dropped (the drop's test of
            // the route, and the old route's, were a call of 9
            // instructions of a proxied GET, callgrind `proxy-c50`).
            Route::Here | Route::Nowhere => std::mem::forget(self),
        }
        parts
    }
}

impl Drop for Responder {
    #[inline]
    fn drop(&mut self) {
        if !matches!(self.route, Route::Nowhere) {
            self.answer_500();
        }
    }
}

impl Responder {
    /// Dropped unsent: the request is answered with a 500.
    #[cold]
    #[inline(never)]
    fn answer_500(&mut self) {
        let answer = Answer {
            token: self.token,
            id: self.id,
            response: Response::error(500),
        };
        match std::mem::replace(&mut self.route, Route::Nowhere) {
            Route::Nowhere => {}
            Route::Mailbox(mailbox) => mailbox.post(Post::Answer(answer)),
            Route::Here => post_here(answer),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A mailbox whose waker nothing waits on, made this thread's.
    fn mailbox_here() -> (mio::Poll, Arc<Mailbox>) {
        let poll = mio::Poll::new().unwrap();
        let mailbox = Arc::new(Mailbox {
            answers: Mutex::new(Vec::new()),
            waker: mio::Waker::new(poll.registry(), mio::Token(0)).unwrap(),
        });
        set_here(&mailbox);
        (poll, mailbox)
    }

    /// The (token, id, status) of each answer posted.
    fn answers(mailbox: &Mailbox) -> Vec<(usize, u64, u16)> {
        mailbox
            .take()
            .into_iter()
            .filter_map(|p| match p {
                Post::Answer(a) => Some((a.token, a.id, a.response.status())),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_same_thread_responder_dropped_unsent_answers_500_through_the_threads_mailbox() {
        let (_poll, mailbox) = mailbox_here();
        drop(Responder::here(5, 7));
        assert_eq!(answers(&mailbox), [(5, 7, 500)]);
        // It holds no count on the mailbox: only the test's and `HERE`'s.
        assert_eq!(Arc::strong_count(&mailbox), 2);
    }

    #[test]
    fn a_same_thread_responder_sent_posts_its_answer() {
        let (_poll, mailbox) = mailbox_here();
        Responder::here(3, 1).send(Response::error(404));
        assert_eq!(answers(&mailbox), [(3, 1, 404)]);
    }

    #[test]
    fn a_responder_taken_apart_posts_nothing() {
        let (_poll, mailbox) = mailbox_here();
        assert_eq!(Responder::here(9, 2).into_parts(), (9, 2));
        assert_eq!(Responder::new(Some(mailbox.clone()), 9, 3).into_parts(), (9, 3));
        drop(Responder::new(None, 9, 4));
        assert_eq!(answers(&mailbox), []);
        assert_eq!(Arc::strong_count(&mailbox), 2);
    }

    #[test]
    fn a_responder_with_the_mailbox_dropped_unsent_answers_500() {
        let (_poll, mailbox) = mailbox_here();
        drop(Responder::new(Some(mailbox.clone()), 4, 8));
        assert_eq!(answers(&mailbox), [(4, 8, 500)]);
    }
}
