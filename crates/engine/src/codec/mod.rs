//! The sans-I/O HTTP/1.1 codec: bytes in, parsed heads and body bytes out,
//! response bytes appended to a buffer. Nothing here touches a socket, so all
//! of it is tested with byte tables and fuzzed (`fuzz/`).

pub mod accept;
pub mod chunked;
pub mod client;
pub mod head;
pub(crate) mod plain;
pub mod proxy;
pub mod write;

pub use chunked::{ChunkedDecoder, ChunkedError};
pub use client::{
    parse_response_head, write_request_head, ParsedResponse, ResponseError, ResponseFraming, ResponseHead,
};
pub use head::{parse_head, FieldNames, Framing, Head, HeadError, Parsed, Version};
