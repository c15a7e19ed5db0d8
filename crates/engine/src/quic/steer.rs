//! Connection IDs that name the endpoint that issued them: the first byte
//! is the endpoint's index among its address's (one per worker, and its
//! socket's index in the UDP SO_REUSEPORT group when there is one socket
//! per worker), so that the kernel's filter
//! (`sys::socket::steer_by_connection_id`) sends each packet to the
//! worker that holds its connection, whatever the client's address; the
//! second is its generation's tag (`handover`), so that after a reload
//! the new generation passes the old one's packets on. The other 6 bytes
//! are random. An observer learns which worker and which generation a
//! connection is on, nothing that links two IDs of one connection beyond
//! that (RFC 9000 §5.1 asks for no more; QUIC-LB's server IDs and
//! config rotation bits are the same idea).

use quinn_proto::{ConnectionId, ConnectionIdGenerator, RandomConnectionIdGenerator};

/// The IDs' length: quinn-proto's default.
pub(crate) const CID_BYTES: usize = 8;

pub(crate) struct EndpointCids {
    index: u8,
    tag: u8,
    random: RandomConnectionIdGenerator,
}

impl EndpointCids {
    pub(crate) fn new(index: u8, tag: u8) -> Self {
        EndpointCids {
            index,
            tag,
            random: RandomConnectionIdGenerator::new(CID_BYTES),
        }
    }
}

impl ConnectionIdGenerator for EndpointCids {
    fn generate_cid(&mut self) -> ConnectionId {
        let random = self.random.generate_cid();
        let mut bytes = [0u8; CID_BYTES];
        bytes.copy_from_slice(&random);
        bytes[0] = self.index;
        bytes[1] = self.tag;
        ConnectionId::new(&bytes)
    }

    fn cid_len(&self) -> usize {
        CID_BYTES
    }

    fn cid_lifetime(&self) -> Option<std::time::Duration> {
        None
    }
}
