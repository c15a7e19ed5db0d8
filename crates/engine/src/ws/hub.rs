//! Publish/subscribe across workers, and a connection's queue from other
//! threads. Each worker keeps its own topics (which of its connections
//! subscribe to what); a published message is framed once and posted to
//! every worker's mailbox (`Post::Publish`), whose loop copies the frame
//! to each subscriber it hosts, as uWebSockets and facil.io do. Nothing
//! is locked per subscriber; the mailbox lock is taken once per worker
//! per message.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use super::Message;
use crate::body::Chunks;
use crate::responder::{Mailbox, Post};

/// A server's workers, to publish to: filled once they are made.
#[derive(Default)]
pub(crate) struct Hub {
    pub(crate) mailboxes: OnceLock<Vec<Arc<Mailbox>>>,
}

/// A message published to a topic: one frame for every subscriber.
pub(crate) struct Published {
    pub(crate) topic: Box<str>,
    pub(crate) frame: Vec<u8>,
    /// The publishing WebSocket (its worker's mailbox, as an address,
    /// and its `Member`), which does not get its own message.
    pub(crate) from: Option<(usize, Member)>,
}

impl Hub {
    fn publish(&self, published: Published) {
        let published = Arc::new(published);
        for mailbox in self.mailboxes.get().into_iter().flatten() {
            mailbox.post(Post::Publish(published.clone()));
        }
    }
}

/// Publishes from any thread ([`super::Socket::publisher`],
/// [`crate::Running::publisher`]).
#[derive(Clone)]
pub struct Publisher {
    pub(crate) hub: Arc<Hub>,
}

impl Publisher {
    /// Sends `msg` to every subscriber of `topic`, on every worker.
    pub fn publish(&self, topic: &str, msg: Message<'_>) {
        self.hub.publish(Published {
            topic: topic.into(),
            frame: super::framed(msg),
            from: None,
        });
    }
}

impl std::fmt::Debug for Publisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publisher").finish_non_exhaustive()
    }
}

/// A WebSocket on a worker: its connection's token, and its HTTP/2 or
/// HTTP/3 stream (0 for a connection that is the WebSocket, after an
/// HTTP/1.1 upgrade; HTTP/3's first request stream is 0 too, but its
/// token is a QUIC connection's, never a TCP one's).
pub(crate) type Member = (usize, u64);

/// A worker's side: its subscribers by topic.
pub(crate) struct Local {
    hub: Arc<Hub>,
    mailbox: Arc<Mailbox>,
    topics: HashMap<Box<str>, Vec<Member>>,
}

impl Local {
    pub(crate) fn new(hub: Arc<Hub>, mailbox: Arc<Mailbox>) -> Self {
        Local {
            hub,
            mailbox,
            topics: HashMap::new(),
        }
    }

    /// This worker's mailbox as an address (which worker published).
    fn me(&self) -> usize {
        Arc::as_ptr(&self.mailbox) as usize
    }

    pub(crate) fn subscribe(&mut self, conn: &mut Subscriber, topic: &str) {
        if conn.topics.iter().any(|t| &**t == topic) {
            return;
        }
        conn.topics.push(topic.into());
        self.topics.entry(topic.into()).or_default().push(conn.member());
    }

    pub(crate) fn unsubscribe(&mut self, conn: &mut Subscriber, topic: &str) {
        let Some(i) = conn.topics.iter().position(|t| &**t == topic) else {
            return;
        };
        conn.topics.swap_remove(i);
        self.forget(topic, conn.member());
    }

    /// The connection is closing: it leaves every topic.
    pub(crate) fn leave_all(&mut self, conn: &mut Subscriber) {
        for topic in std::mem::take(&mut conn.topics) {
            self.forget(&topic, conn.member());
        }
    }

    fn forget(&mut self, topic: &str, member: Member) {
        if let Some(members) = self.topics.get_mut(topic) {
            members.retain(|&m| m != member);
            if members.is_empty() {
                self.topics.remove(topic);
            }
        }
    }

    /// Publishes from this worker's loop; `except` is the publishing
    /// WebSocket.
    pub(crate) fn publish(&mut self, topic: &str, msg: Message<'_>, except: Option<Member>) {
        let me = self.me();
        self.hub.publish(Published {
            topic: topic.into(),
            frame: super::framed(msg),
            from: except.map(|t| (me, t)),
        });
    }

    pub(crate) fn publisher(&self) -> Publisher {
        Publisher { hub: self.hub.clone() }
    }

    /// This worker's subscribers to `p`'s topic, but its publisher, into
    /// `into`.
    pub(crate) fn subscribers(&self, p: &Published, into: &mut Vec<Member>) {
        into.clear();
        let except = p.from.filter(|(w, _)| *w == self.me()).map(|(_, m)| m);
        if let Some(members) = self.topics.get(&p.topic) {
            into.extend(members.iter().copied().filter(|m| Some(*m) != except));
        }
    }
}

/// A WebSocket's side: its connection's token and stream, its topics,
/// and the queue other threads send into.
pub(crate) struct Subscriber {
    pub(crate) token: usize,
    /// Its HTTP/2 or HTTP/3 stream; 0 after an HTTP/1.1 upgrade.
    pub(crate) stream: u64,
    pub(crate) topics: Vec<Box<str>>,
    /// Boxed: most WebSockets never have one.
    pub(crate) outbox: Option<Box<(Chunks, Arc<crate::body::Sender>)>>,
}

impl Subscriber {
    pub(crate) fn new(token: usize, stream: u64) -> Self {
        Subscriber {
            token,
            stream,
            topics: Vec::new(),
            outbox: None,
        }
    }

    pub(crate) fn member(&self) -> Member {
        (self.token, self.stream)
    }

    /// The sender of this connection's queue, made at the first call.
    pub(crate) fn sender(&mut self, capacity: usize, local: &Local) -> Arc<crate::body::Sender> {
        if let Some(outbox) = &self.outbox {
            return outbox.1.clone();
        }
        let (body, tx) = crate::body::channel(capacity);
        let crate::Body::Channel(rx) = body else {
            unreachable!("body::channel makes a channel body")
        };
        // What is sent wakes the connection, which serves its streams.
        rx.bind(&local.mailbox, self.token);
        let tx = Arc::new(tx);
        self.outbox = Some(Box::new((Chunks::Channel(rx), tx.clone())));
        tx
    }
}
