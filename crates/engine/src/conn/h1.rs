//! HTTP/1.1 on a connection: parsing heads from the read buffer, waiting
//! for bodies, calling the handler, and queueing each response (head, and
//! body inline or as a tail the I/O side sends).

use super::*;

impl Conn {
    /// Sets the HTTP/1 state's deadline once the connection waits.
    pub(super) fn h1_deadline(&mut self, ctx: &mut Ctx<'_>, input_empty: bool) -> Option<Next> {
        match self.state {
            State::Idle if input_empty => {
                if self.peer_closed || (ctx.draining && !self.fresh) {
                    return Some(Next::Close);
                }
                // A handshake keeps the deadline set at accept
                // (`head_timeout`): a client that never finishes one is
                // closed then (a 408 cannot be sent before it).
                let handshaking = matches!(&self.transport, Transport::Tls(tls) if tls.is_handshaking());
                if !handshaking {
                    self.state_deadline = ctx.now.checked_add(ctx.limits.idle_timeout);
                }
            }
            State::Idle | State::Head if self.peer_closed => return Some(Next::Close),
            State::Body(_) if self.peer_closed => return Some(Next::Close),
            State::Body(_) => self.state_deadline = ctx.now.checked_add(ctx.limits.body_timeout),
            State::Deferred(_) => self.state_deadline = None,
            _ => {}
        }
        None
    }

    /// Parses a head at the start of the buffer and answers the request if
    /// it has no body or its body is here. `None` means: go on.
    pub(super) fn start_request(&mut self, ctx: &mut Ctx<'_>) -> Option<Stop> {
        let Conn {
            input, output, state, ..
        } = self;
        let data = &input.buf[input.start..input.end];
        let mut headers = [const { MaybeUninit::uninit() }; HEADERS_ARRAY_MAX];
        let head = match parse_head(data, &mut headers, ctx.limits) {
            Ok(Parsed::Complete(head)) => head,
            Ok(Parsed::Partial) => {
                if let State::Idle = state {
                    *state = State::Head;
                    self.state_deadline = ctx.now.checked_add(ctx.limits.head_timeout);
                }
                return Some(Stop::Input);
            }
            Err(HeadError::NotHttp) if self.first && ctx.h2.is_some() => {
                // Neither HTTP/1 nor the HTTP/2 preface: an invalid
                // connection preface, which ends the connection without an
                // answer (RFC 9113 §3.4) — an HTTP/1 400 would be read as
                // a broken frame by an HTTP/2 client.
                if let Some(m) = ctx.metrics {
                    m.record(b"-", 400, ctx.now);
                }
                self.input.start = self.input.end;
                self.state = State::Closing;
                return Some(Stop::Closing);
            }
            Err(e) => {
                self.fail(ctx, e.status(), e.reason());
                return Some(Stop::Closing);
            }
        };
        let head_len = head.head_len;
        self.first = false;
        match head.framing {
            Framing::Empty => {
                let (token, peer) = (self.token, self.peer);
                let via = Via::of(self.redirect, &self.transport);
                ensure_output(output, ctx.pool);
                dispatch(ctx, output, state, token, peer, via, &head, &[]);
                input.start += head_len;
                None
            }
            Framing::Length(n) if (data.len() - head_len) as u64 >= n => {
                let (token, peer) = (self.token, self.peer);
                let via = Via::of(self.redirect, &self.transport);
                let n = n as usize;
                ensure_output(output, ctx.pool);
                dispatch(
                    ctx,
                    output,
                    state,
                    token,
                    peer,
                    via,
                    &head,
                    &data[head_len..head_len + n],
                );
                input.start += head_len + n;
                None
            }
            framing => {
                let expect_continue = head.expect_continue && data.len() == head_len;
                let kind = match framing {
                    Framing::Length(n) => BodyKind::Length(n),
                    _ => BodyKind::Chunked {
                        decoder: ChunkedDecoder::new(ctx.limits.body_bytes_max),
                        read: head_len,
                        write: head_len,
                    },
                };
                *state = State::Body(Box::new(BodyWait {
                    head_len,
                    head_only: head.method == "HEAD",
                    kind,
                }));
                if expect_continue {
                    // RFC 9110 §10.1.1: the client waits for this before
                    // sending the body.
                    ensure_output(output, ctx.pool);
                    output.buf.extend_from_slice(wire::CONTINUE);
                }
                None
            }
        }
    }

    /// Checks whether the body being waited for is complete, and if so
    /// answers its request.
    pub(super) fn continue_body(&mut self, ctx: &mut Ctx<'_>) -> Option<Stop> {
        let Conn {
            input, output, state, ..
        } = self;
        let State::Body(wait) = state else { return None };
        let head_len = wait.head_len;
        let (body, consumed) = match &mut wait.kind {
            BodyKind::Length(n) => {
                let total = head_len + *n as usize;
                if input.end - input.start < total {
                    return Some(Stop::Input);
                }
                (head_len..total, total)
            }
            BodyKind::Chunked { decoder, read, write } => {
                let buf = &mut input.buf[input.start..input.end];
                match decoder.decode_in_place(buf, read, write) {
                    Ok(true) => (head_len..*write, *read),
                    Ok(false) => return Some(Stop::Input),
                    Err(e) => {
                        self.fail(ctx, e.status(), e.reason());
                        return Some(Stop::Closing);
                    }
                }
            }
        };
        let data = &input.buf[input.start..input.end];
        let mut headers = [const { MaybeUninit::uninit() }; HEADERS_ARRAY_MAX];
        // The head was valid when it arrived and its bytes have not moved
        // relative to the request start; parse it again rather than keep a
        // self-referential borrow across reads.
        let Ok(Parsed::Complete(head)) = parse_head(&data[..head_len], &mut headers, ctx.limits) else {
            self.fail(ctx, 500, "request head changed");
            return Some(Stop::Closing);
        };
        *state = State::Idle;
        let (token, peer) = (self.token, self.peer);
        let via = Via::of(self.redirect, &self.transport);
        ensure_output(output, ctx.pool);
        dispatch(ctx, output, state, token, peer, via, &head, &data[body]);
        input.start += consumed;
        None
    }

    /// Queues an error response and moves to closing. The rest of the input
    /// is dropped: its framing cannot be trusted.
    pub(super) fn fail(&mut self, ctx: &mut Ctx<'_>, status: u16, why: &str) {
        self.ensure_output(ctx.pool);
        let head_only = matches!(&self.state, State::Body(wait) if wait.head_only);
        wire::write_error(&mut self.output.buf, status, why, ctx.date.http(), head_only);
        if let Some(log) = ctx.log.as_deref_mut() {
            log.record(&refused_line(ctx.date.clf(), self.peer, b"-", status, ctx.now));
        }
        if let Some(m) = ctx.metrics {
            m.record(b"-", status, ctx.now);
        }
        self.input.start = self.input.end;
        self.state = State::Closing;
    }
}

/// What a request arrived through: which handler answers it and which
/// header fields the transport adds.
#[derive(Clone, Copy)]
pub(super) struct Via<'c> {
    redirect: bool,
    extra_fields: &'c [u8],
}

impl<'c> Via<'c> {
    pub(super) fn of(redirect: bool, transport: &'c Transport) -> Self {
        Via {
            redirect,
            extra_fields: transport.extra_fields(),
        }
    }
}

/// Calls the handler for one request and queues its answer.
#[allow(clippy::too_many_arguments)]
pub(super) fn dispatch(
    ctx: &mut Ctx<'_>,
    output: &mut Output,
    state: &mut State,
    token: usize,
    peer: SocketAddr,
    via: Via<'_>,
    head: &Head<'_, '_>,
    body: &[u8],
) {
    let slot = DeferSlot {
        mailbox: ctx.mailbox,
        token,
        next_id: ctx.next_defer_id,
        id: Cell::new(None),
    };
    let mut req = Request::new(
        head.method,
        head.target,
        head.version,
        head.headers,
        head.host,
        body,
        peer,
    );
    req.defer = Some(&slot);
    let head_only = head.method == "HEAD";
    let keep_alive = head.keep_alive && !ctx.draining;
    let handler = match (via.redirect, ctx.redirect) {
        (true, Some(redirect)) => redirect,
        _ => ctx.handler,
    };
    let reply = panic::catch_unwind(AssertUnwindSafe(|| handler.call(&req)));
    let response = match reply {
        Ok(Reply::Now(response)) => response,
        Ok(Reply::Later) => {
            if let Some(id) = slot.id.get() {
                let log = ctx.log.is_some().then(|| log_request(&req));
                if let Some(m) = ctx.metrics {
                    m.deferred_started.add(1);
                }
                *state = State::Deferred(Box::new(Deferred {
                    id,
                    started: ctx.now,
                    method_idx: crate::metrics::method_index(head.method.as_bytes()),
                    head_only,
                    version: head.version,
                    keep_alive,
                    log,
                }));
                return;
            }
            crate::log::error(format_args!(
                "handler returned Reply::Later without calling Request::defer"
            ));
            Response::error(500).with_close()
        }
        // The panic hook has already printed the message.
        Err(_) => Response::error(500).with_close(),
    };
    let sent = write_response(
        ctx.date,
        output,
        response,
        head_only,
        head.version,
        keep_alive,
        via.extra_fields,
    );
    if let Some(log) = ctx.log.as_deref_mut() {
        log.record(&Line {
            clf_time: ctx.date.clf(),
            peer,
            method: head.method.as_bytes(),
            target: head.target.as_bytes(),
            version: head.version.as_str().as_bytes(),
            status: sent.status,
            body_bytes: sent.body_bytes,
            referer: req.header_bytes("referer"),
            user_agent: req.header_bytes("user-agent"),
            host: head.host.map(str::as_bytes),
            duration_us: Some(micros_since(ctx.now)),
        });
    }
    if let Some(m) = ctx.metrics {
        m.record(head.method.as_bytes(), sent.status, ctx.now);
    }
    *state = if sent.keep_alive { State::Idle } else { State::Closing };
}

pub(super) fn log_request(req: &Request<'_>) -> LogRequest {
    let mut request_line = Vec::with_capacity(req.method().len() + req.target().len() + 10);
    request_line.extend_from_slice(req.method().as_bytes());
    request_line.push(b' ');
    request_line.extend_from_slice(req.target().as_bytes());
    request_line.push(b' ');
    request_line.extend_from_slice(req.version().as_str().as_bytes());
    LogRequest {
        request_line,
        referer: req.header_bytes("referer").map(<[u8]>::to_vec),
        user_agent: req.header_bytes("user-agent").map(<[u8]>::to_vec),
        host: req.host().map(|h| h.as_bytes().to_vec()),
    }
}

/// What was sent, for the log and the connection state.
pub(super) struct Sent {
    pub(super) status: u16,
    pub(super) body_bytes: u64,
    pub(super) keep_alive: bool,
}

/// Queues a response: its head, and its body inline or as the tail.
/// `extra_fields` (complete `Name: value\r\n` lines, from the transport)
/// go at the end of the head unless the handler set the same field.
pub(super) fn write_response(
    date: &DateCache,
    out: &mut Output,
    mut resp: Response,
    head_only: bool,
    version: Version,
    keep_alive: bool,
    extra_fields: &[u8],
) -> Sent {
    if let Some(why) = resp.invalid {
        crate::log::error(format_args!(
            "handler returned an invalid response ({why}); answering 500"
        ));
        resp = Response::error(500).with_close();
    }
    let status = resp.status;
    let bodiless = status == 204 || status == 304;
    let mut keep_alive = keep_alive && !resp.close;
    let framing = match resp.body.len() {
        _ if bodiless => BodyFraming::Bodiless,
        Some(n) => BodyFraming::Length(n),
        None if version == Version::Http11 => BodyFraming::Chunked,
        None => {
            keep_alive = false;
            BodyFraming::Close
        }
    };
    let conn = match (keep_alive, version) {
        (false, _) => ConnField::Close,
        (true, Version::Http10) => ConnField::KeepAlive,
        (true, Version::Http11 | Version::Http2 | Version::Http3) => ConnField::Omit,
    };
    let head_start = out.buf.len();
    wire::write_head(&mut out.buf, &resp, date.http(), framing, conn);
    if !extra_fields.is_empty() {
        let name = extra_fields.split(|&b| b == b':').next().unwrap_or_default();
        let given = std::str::from_utf8(name).is_ok_and(|name| resp.header(name).is_some());
        if !given {
            // Before the blank line that ends the head.
            out.buf.truncate(out.buf.len() - 2);
            out.buf.extend_from_slice(extra_fields);
            out.buf.extend_from_slice(b"\r\n");
        }
    }
    let body_bytes = match framing {
        BodyFraming::Length(n) if !head_only => n,
        _ => 0,
    };
    let sent = Sent {
        status,
        body_bytes,
        keep_alive,
    };
    if head_only || bodiless {
        return sent;
    }
    match resp.body {
        Body::Empty => {}
        Body::Static(b) if b.len() <= INLINE_BODY_BYTES_MAX => out.buf.extend_from_slice(b),
        Body::Static(b) => {
            out.tail = Some(Tail::Shared {
                bytes: SharedBytes::new(Arc::new(b)),
                pos: 0,
            })
        }
        Body::Bytes(b) if b.len() <= INLINE_BODY_BYTES_MAX => out.buf.extend_from_slice(&b),
        Body::Bytes(b) => out.tail = Some(Tail::Bytes { data: b, pos: 0 }),
        Body::Shared(s) if s.range.len() <= INLINE_BODY_BYTES_MAX => out.buf.extend_from_slice(s.as_slice()),
        Body::Shared(s) => out.tail = Some(Tail::Shared { bytes: s, pos: 0 }),
        Body::File(f) if f.len <= INLINE_BODY_BYTES_MAX as u64 => {
            // Small files: read them next to the head, so both leave in one
            // write instead of a write and a sendfile.
            let at = out.buf.len();
            out.buf.resize(at + f.len as usize, 0);
            if f.file.read_exact_at(&mut out.buf[at..], f.offset).is_err() {
                out.buf.truncate(head_start);
                wire::write_error(&mut out.buf, 500, "file could not be read", date.http(), false);
                return Sent {
                    status: 500,
                    body_bytes: 0,
                    keep_alive: false,
                };
            }
        }
        Body::File(f) => out.tail = Some(Tail::File { range: f, sent: 0 }),
        Body::Stream(chunks) => {
            out.tail = Some(Tail::Stream {
                chunks,
                chunked: framing == BodyFraming::Chunked,
            });
        }
    }
    sent
}
