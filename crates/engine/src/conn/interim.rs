//! Interim answers relayed to a deferred request: the reverse proxy's
//! upstream sent `100 Continue` (for a client that asked for it, whose
//! body the proxy streams and whose 100 it held back) or `103 Early
//! Hints`, and the client's connection sends it on before the final
//! answer (RFC 9110 §15.2; nginx drops 103, Caddy and HAProxy relay it).
//! HTTP/1.1 writes it as a status line and fields, HTTP/2 as a HEADERS
//! frame without END_STREAM, HTTP/3 as a HEADERS frame before the final
//! one (`quic::Conn::on_interim`, `h3::Session::send_interim`); an
//! HTTP/1.0 client gets none, and a request no longer awaited drops it.

use super::{Conn, Ctx, Next, Proto};

impl Conn {
    /// An interim answer (`status` 100 or 103, `fields` complete lines)
    /// for this connection's deferred request `id`.
    #[cold]
    #[inline(never)]
    pub(crate) fn on_interim(&mut self, ctx: &mut Ctx<'_>, id: u64, status: u16, fields: &[u8]) -> Next {
        self.ensure_output(ctx.pool);
        let queued = match &mut self.proto {
            Proto::H1(h1) => {
                h1.deferral.as_ref().is_some_and(|d| d.id == id) && h1.machine.interim(&mut self.output, status, fields)
            }
            Proto::H2(h2) => {
                let Some(stream) = h2.session.deferred_stream(id) else {
                    return Next::Keep;
                };
                match status {
                    100 => h2.session.send_continue(stream, &mut self.output.buf),
                    _ => h2.session.send_interim(stream, status, fields, &mut self.output.buf),
                }
                true
            }
            Proto::Ws(_) | Proto::Tunnel(_) => false,
        };
        if !queued {
            return Next::Keep;
        }
        self.drive(ctx)
    }
}
