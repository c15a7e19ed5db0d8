//! WebSocket frames as a client sends them (RFC 6455 §5.2-5.3), for the
//! engine's tests of its frame machine and of a running server.

/// A client frame: FIN/RSV/opcode byte `b0`, then `payload` masked (the
/// shortest length encoding).
pub fn masked(b0: u8, payload: &[u8]) -> Vec<u8> {
    let mask = [0x37, 0xfa, 0x21, 0x3d];
    let mut v = vec![b0];
    match payload.len() {
        n @ 0..=125 => v.push(0x80 | n as u8),
        n @ 126..=0xFFFF => {
            v.push(0x80 | 126);
            v.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            v.push(0x80 | 127);
            v.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    v.extend_from_slice(&mask);
    v.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    v
}
