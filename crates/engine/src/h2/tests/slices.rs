//! DATA payloads as slices (splice.rs).

use super::*;

/// A body of `n` distinct-ish bytes that lives for good, as `kind` says.
fn lasting_body(kind: usize, n: usize) -> Body {
    let bytes: Vec<u8> = (0..n).map(|i| (i * 7 + i / 251) as u8).collect();
    if kind == 0 {
        Body::Static(Box::leak(bytes.into_boxed_slice()))
    } else {
        // A range inside a larger buffer, as an archive entry is.
        let mut whole = vec![0xee; 100];
        whole.extend_from_slice(&bytes);
        whole.extend_from_slice(&[0xdd; 50]);
        let whole: std::sync::Arc<dyn AsRef<[u8]> + Send + Sync> = std::sync::Arc::new(whole);
        Body::Shared(crate::response::SharedBytes::slice(whole, 100..100 + n).unwrap())
    }
}

/// Moves what `session` queued (`out` and its slices) to `wire`, as a
/// write would.
fn drain(session: &mut Session, out: &mut Vec<u8>, wire: &mut Vec<u8>) {
    session.splices.flatten(out, 0, wire);
    session.splices.clear();
    out.clear();
}

/// Runs the same exchange on a session that splices and one that copies
/// (small windows, a small frame size, a small budget: bodies cut at every
/// kind of boundary) and returns both sessions' bytes on the wire, and
/// whether the splicing one queued any slice.
fn spliced_and_copied(kind: usize, n: usize, budget: usize) -> (Vec<u8>, Vec<u8>, bool) {
    let mut wires = Vec::new();
    let mut any_slice = false;
    for splicing in [true, false] {
        let mut session = Session::new(cfg());
        session.set_splicing(splicing);
        let mut out = Vec::new();
        let mut wire = Vec::new();
        session.start(&mut out);
        let mut input = client_preface();
        input.extend(settings(&[(frame::SETTINGS_INITIAL_WINDOW_SIZE, 5000)]));
        input.extend(get(1, "/a"));
        input.extend(get(3, "/b"));
        session.handle_input(&input, &mut out);
        for id in [1, 3] {
            assert_eq!(session.take_ready(), Some(id));
            let mut resp = Response::new(200).with_body(lasting_body(kind, n + id as usize));
            session.respond(id, &mut resp, false, DATE, b"", &mut out, budget);
            any_slice |= !session.splices.is_empty();
            assert!(out.len() + session.splices.bytes() <= budget + 1024 + 200);
            drain(&mut session, &mut out, &mut wire);
        }
        for _ in 0..100 {
            if session.is_idle() {
                break;
            }
            session.handle_input(&window_update(0, 3000), &mut out);
            session.handle_input(&window_update(1, 3000), &mut out);
            session.handle_input(&window_update(3, 3000), &mut out);
            while session.wants_send() {
                session.send(&mut out, budget);
                any_slice |= !session.splices.is_empty();
                assert!(out.len() + session.splices.bytes() <= budget + 1024 + 200);
                drain(&mut session, &mut out, &mut wire);
            }
        }
        assert!(session.is_idle(), "kind {kind}, {n} bytes: not all sent");
        wires.push(wire);
    }
    let copied = wires.pop().unwrap();
    let spliced = wires.pop().unwrap();
    (spliced, copied, any_slice)
}

#[test]
fn lasting_bodies_leave_as_slices_with_the_same_bytes_as_copied() {
    for kind in [0, 1] {
        for n in [0, 17, 1000, 1023, 1024, 4096, 16_383, 16_384, 16_385, 40_000] {
            for budget in [3000, BUDGET] {
                let (spliced, copied, any_slice) = spliced_and_copied(kind, n, budget);
                assert_eq!(spliced, copied, "kind {kind}, {n} bytes, budget {budget}");
                // Both bodies (n+1, n+3 bytes) are at least the minimum: sliced.
                assert_eq!(any_slice, n + 1 >= splice::SPLICE_BYTES_MIN, "kind {kind}, {n} bytes");
                // And what the client reads is the bodies, whole and in order.
                let frames = parse(&spliced);
                for id in [1u32, 3] {
                    let want: Vec<u8> = match lasting_body(kind, n + id as usize) {
                        Body::Static(b) => b.to_vec(),
                        Body::Shared(s) => s.as_slice().to_vec(),
                        _ => unreachable!(),
                    };
                    assert_eq!(body_of(&frames, id), (want, true), "kind {kind}, {n} bytes");
                }
            }
        }
    }
}

#[test]
fn owned_and_file_bodies_are_copied_not_sliced() {
    let mut p = Peer::new(cfg());
    p.feed(&get(1, "/"));
    p.ready();
    p.respond(1, Response::text(vec![b'x'; 5000]));
    assert!(p.session.splices.is_empty());
    assert_eq!(body_of(&p.frames(), 1), (vec![b'x'; 5000], true));
}

#[test]
fn splices_are_written_in_order_whatever_the_writes_take() {
    use std::io::IoSlice;
    // buf: 9 bytes, slice A, 5 bytes, slice B, 3 bytes.
    let buf: Vec<u8> = (0..17u8).collect();
    let a: &'static [u8] = &[100; 7];
    let b: &'static [u8] = &[200; 4];
    let make = || {
        let mut s = splice::Splices::default();
        s.push(9, splice::Slice::Static(a));
        s.push(14, splice::Slice::Static(b));
        s
    };
    let mut want = Vec::new();
    make().flatten(&buf, 0, &mut want);
    assert_eq!(want.len(), 17 + 7 + 4);
    assert_eq!(&want[9..16], a);
    // Every write size, iovec count and cap: the bytes come out as flattened.
    for step in 1..=want.len() {
        for iov_len in [2, 3, 5, 16] {
            for max in [1, 4, 9, 10, 1000] {
                let mut s = make();
                let mut pos = 0;
                let mut got = Vec::new();
                while !s.is_empty() || pos < buf.len() {
                    let mut iov = vec![IoSlice::new(&[]); iov_len];
                    let k = s.gather(&buf, pos, &mut iov, max);
                    assert!(k > 0);
                    let all: Vec<u8> = iov[..k].iter().flat_map(|v| v.iter().copied()).collect();
                    assert!(!all.is_empty() && all.len() <= max);
                    let n = step.min(all.len());
                    got.extend_from_slice(&all[..n]);
                    s.advance(&mut pos, n);
                    assert_eq!(s.bytes() + buf.len() - pos, want.len() - got.len());
                }
                assert_eq!(got, want, "step {step}, {iov_len} iovecs, at most {max}");
            }
        }
    }
}

/// A body beside its header block (`Response::prepared_beside`) leaves as
/// the same frames, head and DATA, spliced or copied, as the block with a
/// `SharedBytes` body of the same buffer; and nothing keeps the buffer
/// once the stream is done.
#[test]
fn a_body_beside_its_block_sends_what_the_block_and_a_shared_body_send() {
    use crate::response::SharedBytes;
    let (whole, lines) = crate::response::beside_buffer(b"etag: \"x\"\r\ncache-control: max-age=60\r\n", 40_000);
    let block = || crate::response::beside_block(&whole, lines);
    for n in [0, 5, 1023, 1024, 16_385, 40_000] {
        for splicing in [true, false] {
            let body = lines..lines + n;
            let mut wires = Vec::new();
            for beside in [false, true] {
                let mut session = Session::new(cfg());
                session.set_splicing(splicing);
                let (mut out, mut wire) = (Vec::new(), Vec::new());
                session.start(&mut out);
                let mut input = client_preface();
                input.extend(get(1, "/a"));
                session.handle_input(&input, &mut out);
                assert_eq!(session.take_ready(), Some(1));
                let mut resp = if beside {
                    Response::prepared_beside(200, block(), body.clone())
                } else {
                    let shared = SharedBytes::slice(whole.clone(), body.clone()).unwrap();
                    Response::prepared(200, block(), Body::Shared(shared))
                };
                session.respond(1, &mut resp, false, DATE, b"", &mut out, BUDGET);
                drain(&mut session, &mut out, &mut wire);
                while session.wants_send() {
                    session.send(&mut out, BUDGET);
                    drain(&mut session, &mut out, &mut wire);
                }
                assert!(session.is_idle(), "{n} bytes: not all sent");
                let frames = parse(&wire);
                let head = frames.iter().find(|f| f.kind == frame::HEADERS).unwrap();
                let fields = head.fields();
                assert!(
                    fields.contains(&("etag".to_string(), "\"x\"".to_string())),
                    "{fields:?}"
                );
                assert!(fields.contains(&("cache-control".to_string(), "max-age=60".to_string())));
                let sent = (*whole).as_ref()[body.clone()].to_vec();
                assert_eq!(body_of(&frames, 1), (sent, n > 0), "{n} bytes");
                wires.push(wire);
            }
            assert_eq!(wires[0], wires[1], "{n} bytes, splicing {splicing}");
        }
    }
    assert_eq!(std::sync::Arc::strong_count(&whole), 1);
}
