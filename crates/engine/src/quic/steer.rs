//! Connection IDs that name the worker: the first byte of every ID a
//! worker issues is its socket's index in the UDP SO_REUSEPORT group, so
//! that the kernel's filter (`sys::socket::steer_by_connection_id`) sends
//! each packet to the worker that holds its connection, whatever the
//! client's address. The other 7 bytes are random. An observer learns
//! which worker a connection is on, nothing that links two IDs of one
//! connection beyond that (RFC 9000 §5.1 asks for no more; QUIC-LB's
//! server IDs are the same idea).

use quinn_proto::{ConnectionId, ConnectionIdGenerator, RandomConnectionIdGenerator};

/// The IDs' length: quinn-proto's default.
const CID_BYTES: usize = 8;

pub(crate) struct WorkerCids {
    worker: u8,
    random: RandomConnectionIdGenerator,
}

impl WorkerCids {
    pub(crate) fn new(worker: u8) -> Self {
        WorkerCids {
            worker,
            random: RandomConnectionIdGenerator::new(CID_BYTES),
        }
    }
}

impl ConnectionIdGenerator for WorkerCids {
    fn generate_cid(&mut self) -> ConnectionId {
        let random = self.random.generate_cid();
        let mut bytes = [0u8; CID_BYTES];
        bytes.copy_from_slice(&random);
        bytes[0] = self.worker;
        ConnectionId::new(&bytes)
    }

    fn cid_len(&self) -> usize {
        CID_BYTES
    }

    fn cid_lifetime(&self) -> Option<std::time::Duration> {
        None
    }
}
