//! Tests of the HTTP/3 framing, QPACK and the session.
