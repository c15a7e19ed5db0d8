//! Which response fields a header compressor may put in its dynamic table
//! (HPACK's, for HTTP/2), which it must send as literals, and which never
//! indexed because they may carry a credential. Beside HPACK in
//! `message/` so that QPACK can use the same list should its encoder ever
//! index (or set the N bit: see `h3/qpack.rs` for why it does not yet).

/// Defines `INDEXED` (for the tests) and `indexed_exact`, a `match` on
/// the lowercase name: what `indexing` asks of every field of every answer
/// instead of a loop of case-blind compares over the lists.
macro_rules! indexed_names {
    ($($name:literal,)*) => {
        #[cfg(test)]
        const INDEXED: &[&[u8]] = &[$($name),*];
        fn indexed_exact(name: &[u8]) -> bool {
            matches!(name, $($name)|*)
        }
    };
}

/// Defines `NEVER_INDEXED` (for the tests) and `never_exact`.
macro_rules! never_indexed_names {
    ($($name:literal,)*) => {
        #[cfg(test)]
        const NEVER_INDEXED: &[&[u8]] = &[$($name),*];
        fn never_exact(name: &[u8]) -> bool {
            matches!(name, $($name)|*)
        }
    };
}

/// How a response field goes into a header block (RFC 7541 §6.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Indexing {
    /// Indexed when the table has it, else a literal with incremental
    /// indexing (§6.2.1): the fields of `INDEXED` that repeat from answer
    /// to answer.
    Table,
    /// A literal without indexing (§6.2.2): a field not known to repeat.
    Literal,
    /// A literal never indexed (§6.2.3): a field that may carry a
    /// credential, which no intermediary may index either (§7.1.3).
    Never,
}

// The response fields worth a place in the dynamic table: those that
// repeat from answer to answer on one connection. `date` is one: it
// changes once a second, so within the second it costs one byte instead
// of a 24-byte literal (nghttp -nv, the site's `/` asked three times: 38
// -> 14 bytes of HEADERS), and the entry it adds each second (65 bytes)
// pushes the oldest out of a 4096-byte table about once a minute at
// most. nginx indexes nothing; Caddy (Go's hpack) indexes every field
// but those marked sensitive. Validators and lengths repeat whenever a
// connection asks for a file again (h2load -c 50 -m 32 on a 4 KiB file,
// one run each: 2.46 -> 2.10 µs of server CPU per answer when they were
// indexed too); the table's FIFO eviction bounds the churn of those that
// do not. A field a handler names that is not here stays a literal: it
// may hold something secret that a credential check did not foresee.
indexed_names! {
    b"server",
    b"date",
    b"content-type",
    b"content-length",
    b"content-encoding",
    b"content-language",
    b"cache-control",
    b"vary",
    b"alt-svc",
    b"strict-transport-security",
    b"accept-ranges",
    b"etag",
    b"last-modified",
    b"x-content-type-options",
    b"x-frame-options",
    b"x-xss-protection",
    b"referrer-policy",
    b"content-security-policy",
    b"permissions-policy",
    b"cross-origin-opener-policy",
    b"cross-origin-embedder-policy",
    b"cross-origin-resource-policy",
    b"access-control-allow-origin",
    b"access-control-allow-methods",
    b"access-control-allow-headers",
    b"access-control-allow-credentials",
    b"access-control-expose-headers",
    b"access-control-max-age",
    b"allow",
    b"link",
    b"via",
}

// Fields that carry credentials by their definition (RFC 9110 §11.6,
// RFC 6265): never indexed, so that no one who can add fields to the
// same connection's answers can guess them from the size of a block
// (RFC 7541 §7.1.3: "an encoder might choose not to index values for
// header fields that are considered to be highly valuable or sensitive
// to recovery, such as the Cookie or Authorization header fields").
never_indexed_names! {
    b"set-cookie",
    b"cookie",
    b"authorization",
    b"proxy-authorization",
    b"authentication-info",
    b"proxy-authentication-info",
}

/// Parts of a field name that say it carries a credential (`x-auth-token`,
/// `x-api-key`, `x-csrf-token`, a session id): never indexed either.
const CREDENTIAL_WORDS: [&[u8]; 8] = [
    b"auth",
    b"token",
    b"secret",
    b"password",
    b"session",
    b"api-key",
    b"apikey",
    b"csrf",
];

/// How the field named `name` (any case) is encoded.
pub(crate) fn indexing(name: &[u8]) -> Indexing {
    // Names are lowercase as sent (RFC 9113 §8.2.1); one that is not is
    // lowercased into a stack buffer first.
    let mut lower = [0u8; 64];
    let name = if name.iter().any(u8::is_ascii_uppercase) && name.len() <= lower.len() {
        let lower = &mut lower[..name.len()];
        lower.copy_from_slice(name);
        lower.make_ascii_lowercase();
        &*lower
    } else {
        name
    };
    if indexed_exact(name) {
        Indexing::Table
    } else if never_exact(name)
        || CREDENTIAL_WORDS
            .iter()
            .any(|w| name.windows(w.len()).any(|part| part.eq_ignore_ascii_case(w)))
    {
        Indexing::Never
    } else {
        Indexing::Literal
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_never_indexed_and_the_allow_list_holds_none() {
        for name in [
            &b"Set-Cookie"[..],
            b"cookie",
            b"authorization",
            b"x-auth-token",
            b"x-session-id",
            b"x-api-key",
        ] {
            assert_eq!(indexing(name), Indexing::Never, "{}", String::from_utf8_lossy(name));
        }
        for name in NEVER_INDEXED {
            assert_eq!(indexing(name), Indexing::Never);
        }
        assert_eq!(indexing(b"Content-Type"), Indexing::Table);
        assert_eq!(indexing(b"x-custom"), Indexing::Literal);
        assert_eq!(indexing(b"location"), Indexing::Literal);
        for name in INDEXED {
            assert_eq!(indexing(name), Indexing::Table);
            assert!(!CREDENTIAL_WORDS.iter().any(|w| name.windows(w.len()).any(|p| p == *w)));
        }
    }
}
