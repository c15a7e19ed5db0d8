//! Header fields as the stream protocols decode them (HPACK for HTTP/2,
//! QPACK for HTTP/3): spans into one byte buffer, bounded by the list
//! size the peer was told, and the `Name: value` lines of our own
//! response heads read back for encoding.

/// What a field costs besides its bytes, in a dynamic table (RFC 7541
/// §4.1; RFC 9204 §3.2.1) and in the list size a peer is told
/// (SETTINGS_MAX_HEADER_LIST_SIZE, SETTINGS_MAX_FIELD_SECTION_SIZE).
pub(crate) const ENTRY_OVERHEAD: usize = 32;

/// One decoded field: spans into the caller's byte buffer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Field {
    pub(crate) name: (u32, u32),
    pub(crate) value: (u32, u32),
    /// Known to pass `head::field_is_valid` (it came from the static
    /// table, or from a dynamic entry checked when it was inserted): the
    /// request check skips its byte scans. Set only by the HPACK decoder.
    pub(crate) checked: bool,
}

/// Where decoded fields go. Past `list_bytes_max` (names, values and 32
/// bytes each, as SETTINGS_MAX_HEADER_LIST_SIZE counts) fields are still
/// decoded, to keep the dynamic table in step with the client's, but no
/// longer stored, and `oversized` is set.
pub(crate) struct Sink<'a> {
    pub(crate) bytes: &'a mut Vec<u8>,
    pub(crate) fields: &'a mut Vec<Field>,
    pub(crate) list_bytes_max: usize,
    pub(crate) list_bytes: usize,
    pub(crate) oversized: bool,
}

impl<'a> Sink<'a> {
    /// An empty sink into `bytes` and `fields`, holding at most
    /// `list_bytes_max`.
    pub(crate) fn new(bytes: &'a mut Vec<u8>, fields: &'a mut Vec<Field>, list_bytes_max: usize) -> Self {
        Sink {
            bytes,
            fields,
            list_bytes_max,
            list_bytes: 0,
            oversized: false,
        }
    }

    pub(crate) fn push(&mut self, name: &[u8], value: &[u8]) {
        self.push_checked(name, value, false);
    }

    /// `push`, saying whether the field is known to be valid.
    pub(crate) fn push_checked(&mut self, name: &[u8], value: &[u8], checked: bool) {
        self.list_bytes += name.len() + value.len() + ENTRY_OVERHEAD;
        if self.list_bytes > self.list_bytes_max {
            self.oversized = true;
            return;
        }
        let at = self.bytes.len() as u32;
        self.bytes.extend_from_slice(name);
        self.bytes.extend_from_slice(value);
        let name_len = name.len() as u32;
        self.fields.push(Field {
            name: (at, name_len),
            value: (at + name_len, value.len() as u32),
            checked,
        });
    }

    /// Keeps the field decoded in place at `bytes[at..]` (its name the
    /// first `name_len` bytes), or drops it past the list limit.
    pub(crate) fn keep(&mut self, at: usize, name_len: usize, checked: bool) {
        let len = self.bytes.len() - at;
        self.list_bytes += len + ENTRY_OVERHEAD;
        if self.list_bytes > self.list_bytes_max {
            self.oversized = true;
            self.bytes.truncate(at);
            return;
        }
        self.fields.push(Field {
            name: (at as u32, name_len as u32),
            value: ((at + name_len) as u32, (len - name_len) as u32),
            checked,
        });
    }
}

/// Calls `f` with each `Name: value\r\n` line's name and trimmed value.
/// (The blocks are ours, each line ended by CRLF: a search for LF is
/// enough, and unlike `memmem` it builds no searcher per call, which was
/// 8% of an h2load run on `serve DIR`.)
pub(crate) fn for_each_line(mut lines: &[u8], mut f: impl FnMut(&[u8], &[u8])) {
    while let Some(end) = memchr::memchr(b'\n', lines) {
        let line = lines[..end].strip_suffix(b"\r").unwrap_or(&lines[..end]);
        if let Some(colon) = memchr::memchr(b':', line) {
            let value = line[colon + 1..].trim_ascii();
            f(&line[..colon], value);
        }
        lines = &lines[end + 1..];
    }
}
