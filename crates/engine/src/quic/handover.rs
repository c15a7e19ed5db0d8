//! One reader per UDP socket, across workers and reloads: each datagram
//! goes to the endpoint that issued its destination connection ID.
//!
//! A reload hands the next generation the same UDP sockets while the old
//! one finishes its connections. Both reading one socket, each datagram
//! went to whichever called `recvmmsg` first: the idle new generation won
//! a good part of a download's acknowledgments and flow-control credit
//! (144 of the 313 client datagrams after the SIGHUP in one run, counted
//! per endpoint), answered them with stateless resets the client could
//! not match, and the old connection crawled or stalled. Workers sharing a socket (more workers
//! than sockets) had the same problem among themselves.
//!
//! So, as h2o does between its threads: every connection ID names the
//! endpoint that issued it (`steer::EndpointCids`: its index among the
//! address's endpoints, and its generation's tag), the newest generation
//! alone reads the sockets, and a datagram whose ID names another live
//! endpoint is queued for that endpoint (`Inbox`) and its worker woken.
//! A generation that is not the newest stops reading when it drains
//! (`Endpoint::drain`), and is fed by its inbox until its connections end;
//! when the newest ends first (a shutdown of all), the next newest reads
//! again. A forwarded datagram is never forwarded again, but for one case:
//! an Initial that a draining generation would ignore (a client's own ID,
//! which happened to look like that generation's) goes to the newest
//! generation, which handles whatever it is sent. No loop, then, and each
//! inbox holds at most `INBOX_BYTES_MAX` (more is dropped, as a full
//! socket buffer would).

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use bytes::BytesMut;

use crate::responder::Mailbox;

/// What an inbox may hold, in datagram bytes: as much as a socket's
/// receive buffer (`UDP_BUFFER_BYTES`).
const INBOX_BYTES_MAX: usize = super::UDP_BUFFER_BYTES;

/// The generations serving HTTP/3 on one address's UDP sockets: handed
/// with the sockets from one generation to the next (`Listening`).
pub(crate) struct Generations {
    table: Mutex<Table>,
    /// Bumped at each change, so that readers refresh their `Routes`.
    version: AtomicU64,
}

impl std::fmt::Debug for Generations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let tags: Vec<u8> = self.table().live.iter().map(|l| l.tag).collect();
        f.debug_struct("Generations").field("live", &tags).finish()
    }
}

#[derive(Default)]
struct Table {
    /// Oldest first: the last is the newest, the one that reads.
    live: Vec<Live>,
    next_tag: u8,
}

struct Live {
    tag: u8,
    /// By endpoint index (the first byte of the connection IDs).
    inboxes: Arc<[Arc<Inbox>]>,
    /// Endpoints not yet gone.
    n_left: usize,
}

/// Where datagrams go, as a reader last saw it: by tag, the live
/// generations' inboxes.
pub(crate) struct Routes {
    version: u64,
    by_tag: Vec<Option<Arc<[Arc<Inbox>]>>>,
    newest: Option<u8>,
}

impl Routes {
    pub(crate) fn new() -> Self {
        Routes {
            version: u64::MAX,
            by_tag: vec![None; 256],
            newest: None,
        }
    }

    /// The inbox of the endpoint that issued connection ID `cid`, if it is
    /// live.
    pub(crate) fn inbox(&self, cid: &[u8]) -> Option<&Arc<Inbox>> {
        let (&index, &tag) = (cid.first()?, cid.get(1)?);
        self.by_tag[usize::from(tag)].as_ref()?.get(usize::from(index))
    }

    /// An inbox of the newest generation, unless it is `tag`'s.
    pub(crate) fn newest_but(&self, tag: u8, index: usize) -> Option<&Arc<Inbox>> {
        let newest = self.newest.filter(|&n| n != tag)?;
        let inboxes = self.by_tag[usize::from(newest)].as_ref()?;
        inboxes.get(index % inboxes.len().max(1))
    }
}

impl Generations {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Generations {
            table: Mutex::new(Table::default()),
            version: AtomicU64::new(0),
        })
    }

    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        // A panic while holding the lock leaves the table consistent.
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A generation of `n` endpoints joins, as the newest: one membership
    /// per endpoint (its tag and inbox; dropping it leaves).
    pub(crate) fn join(self: &Arc<Self>, n: usize) -> Vec<Member> {
        let mut table = self.table();
        // The next tag no live generation has (256 generations at once
        // would take a reload per request for minutes: then one is shared,
        // and its datagrams may go astray, as they did before tags).
        let mut tag = table.next_tag;
        for _ in 0..256 {
            if !table.live.iter().any(|l| l.tag == tag) {
                break;
            }
            tag = tag.wrapping_add(1);
        }
        table.next_tag = tag.wrapping_add(1);
        let inboxes: Arc<[Arc<Inbox>]> = (0..n).map(|_| Arc::new(Inbox::new())).collect();
        table.live.push(Live {
            tag,
            inboxes: inboxes.clone(),
            n_left: n,
        });
        self.version.fetch_add(1, Ordering::Release);
        drop(table);
        inboxes
            .iter()
            .map(|inbox| Member {
                generations: self.clone(),
                tag,
                inbox: inbox.clone(),
            })
            .collect()
    }

    /// Whether `tag` is the newest generation (the one that reads).
    pub(crate) fn is_newest(&self, tag: u8) -> bool {
        self.table().live.last().is_some_and(|l| l.tag == tag)
    }

    /// Brings `routes` up to date, if anything changed.
    pub(crate) fn refresh(&self, routes: &mut Routes) {
        let version = self.version.load(Ordering::Acquire);
        if version == routes.version {
            return;
        }
        let table = self.table();
        routes.by_tag.iter_mut().for_each(|r| *r = None);
        for live in &table.live {
            routes.by_tag[usize::from(live.tag)] = Some(live.inboxes.clone());
        }
        routes.newest = table.live.last().map(|l| l.tag);
        routes.version = self.version.load(Ordering::Acquire);
    }

    /// One endpoint of generation `tag` is gone: the generation leaves
    /// with its last. If it was the newest, the next newest reads now.
    fn leave(&self, tag: u8) {
        let mut table = self.table();
        let Some(at) = table.live.iter().position(|l| l.tag == tag) else {
            return;
        };
        table.live[at].n_left -= 1;
        if table.live[at].n_left > 0 {
            return;
        }
        let newest = at + 1 == table.live.len();
        table.live.remove(at);
        self.version.fetch_add(1, Ordering::Release);
        if newest {
            if let Some(next) = table.live.last() {
                for inbox in next.inboxes.iter() {
                    inbox.wake();
                }
            }
        }
    }
}

/// One endpoint's place among the generations.
pub(crate) struct Member {
    pub(crate) generations: Arc<Generations>,
    pub(crate) tag: u8,
    pub(crate) inbox: Arc<Inbox>,
}

impl Drop for Member {
    fn drop(&mut self) {
        self.inbox.close();
        self.generations.leave(self.tag);
    }
}

/// A datagram read by another endpoint.
pub(crate) struct Forwarded {
    pub(crate) from: SocketAddr,
    pub(crate) dst_ip: Option<IpAddr>,
    pub(crate) ecn: Option<quinn_udp::EcnCodepoint>,
    pub(crate) data: BytesMut,
}

/// The datagrams other endpoints read for one endpoint.
pub(crate) struct Inbox {
    queue: Mutex<Queue>,
    /// The worker's mailbox, whose waker this inbox uses.
    mailbox: OnceLock<Arc<Mailbox>>,
    /// The worker has been woken and has not looked yet.
    told: AtomicBool,
    /// The endpoint is gone: nothing more is queued.
    closed: AtomicBool,
}

#[derive(Default)]
struct Queue {
    datagrams: VecDeque<Forwarded>,
    bytes: usize,
}

impl Inbox {
    fn new() -> Self {
        Inbox {
            queue: Mutex::new(Queue::default()),
            mailbox: OnceLock::new(),
            told: AtomicBool::new(false),
            closed: AtomicBool::new(false),
        }
    }

    /// The worker to wake when datagrams come.
    pub(crate) fn bind(&self, mailbox: Arc<Mailbox>) {
        let _ = self.mailbox.set(mailbox);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Queues a datagram (the caller wakes the worker once it has queued
    /// what it read). False if it was dropped: the endpoint is gone, or
    /// its inbox full.
    pub(crate) fn push(&self, datagram: Forwarded) -> bool {
        let mut queue = self.lock();
        if self.is_closed() || queue.bytes + datagram.data.len() > INBOX_BYTES_MAX {
            return false;
        }
        queue.bytes += datagram.data.len();
        queue.datagrams.push_back(datagram);
        true
    }

    /// Wakes the worker, unless it was woken and has not looked yet.
    pub(crate) fn wake(&self) {
        if !self.told.swap(true, Ordering::AcqRel) {
            if let Some(mailbox) = self.mailbox.get() {
                // Fails only if the worker is gone.
                let _ = mailbox.waker.wake();
            }
        }
    }

    /// Whether the worker was woken for this inbox (and now looks).
    pub(crate) fn take_told(&self) -> bool {
        self.told.swap(false, Ordering::AcqRel)
    }

    /// Moves what is queued into `out`.
    pub(crate) fn take(&self, out: &mut VecDeque<Forwarded>) {
        let mut queue = self.lock();
        queue.bytes = 0;
        std::mem::swap(&mut queue.datagrams, out);
    }

    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        let mut queue = self.lock();
        queue.datagrams.clear();
        queue.bytes = 0;
    }
}

/// The destination connection ID of a QUIC datagram's first packet, if
/// it has one of `len` bytes (ours): after the first byte in a short
/// header, after the version and length in a long one.
pub(crate) fn dcid(datagram: &[u8], len: usize) -> Option<&[u8]> {
    let first = *datagram.first()?;
    if first & 0x80 != 0 {
        if usize::from(*datagram.get(5)?) != len {
            return None;
        }
        datagram.get(6..6 + len)
    } else {
        datagram.get(1..1 + len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_destination_id_is_found_in_both_headers() {
        let short = [0x40, 1, 2, 3, 4, 5, 6, 7, 8, 9];
        assert_eq!(dcid(&short, 8), Some(&[1, 2, 3, 4, 5, 6, 7, 8][..]));
        let long = [0xc0, 0, 0, 0, 1, 8, 1, 2, 3, 4, 5, 6, 7, 8, 0];
        assert_eq!(dcid(&long, 8), Some(&[1, 2, 3, 4, 5, 6, 7, 8][..]));
        // A client's own ID of another length, and truncated datagrams.
        let other = [0xc0, 0, 0, 0, 1, 5, 1, 2, 3, 4, 5];
        assert_eq!(dcid(&other, 8), None);
        assert_eq!(dcid(&short[..5], 8), None);
        assert_eq!(dcid(&[], 8), None);
    }

    #[test]
    fn generations_route_by_tag_and_the_next_newest_takes_over() {
        let gens = Generations::new();
        let old = gens.join(2);
        let new = gens.join(1);
        let (old_tag, new_tag) = (old[0].tag, new[0].tag);
        assert_ne!(old_tag, new_tag);
        assert!(gens.is_newest(new_tag) && !gens.is_newest(old_tag));
        let mut routes = Routes::new();
        gens.refresh(&mut routes);
        assert!(Arc::ptr_eq(routes.inbox(&[1, old_tag]).unwrap(), &old[1].inbox));
        assert!(Arc::ptr_eq(routes.inbox(&[0, new_tag]).unwrap(), &new[0].inbox));
        assert!(routes.inbox(&[2, old_tag]).is_none(), "no such endpoint");
        assert!(Arc::ptr_eq(routes.newest_but(old_tag, 1).unwrap(), &new[0].inbox));
        assert!(routes.newest_but(new_tag, 0).is_none());
        // The newest ends first: the old generation is the newest again,
        // and its tag is not reused while it lives.
        drop(new);
        assert!(gens.is_newest(old_tag));
        let third = gens.join(1);
        assert_ne!(third[0].tag, old_tag);
        gens.refresh(&mut routes);
        assert!(routes.inbox(&[0, new_tag]).is_none());
        drop(old);
        drop(third);
        gens.refresh(&mut routes);
        assert!(routes.by_tag.iter().all(Option::is_none));
    }

    #[test]
    fn an_inbox_is_bounded_and_closes_with_its_endpoint() {
        let gens = Generations::new();
        let members = gens.join(1);
        let inbox = members[0].inbox.clone();
        let datagram = |n: usize| Forwarded {
            from: SocketAddr::from(([127, 0, 0, 1], 1)),
            dst_ip: None,
            ecn: None,
            data: BytesMut::zeroed(n),
        };
        let mut pushed = 0;
        while inbox.push(datagram(1200)) {
            pushed += 1200;
        }
        assert!(pushed <= INBOX_BYTES_MAX && pushed + 1200 > INBOX_BYTES_MAX);
        let mut out = VecDeque::new();
        inbox.take(&mut out);
        assert_eq!(out.len() * 1200, pushed);
        assert!(inbox.push(datagram(1200)), "room again once taken");
        drop(members);
        assert!(inbox.is_closed() && !inbox.push(datagram(1200)));
    }
}
