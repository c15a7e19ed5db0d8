//! Tests of the HTTP/2 session, driven by scripted frames.
