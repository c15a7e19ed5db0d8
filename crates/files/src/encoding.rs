//! Content negotiation on `Accept-Encoding` (RFC 9110 §12.5.3) among the
//! pre-compressed siblings a file has (`x.br`, `x.zst`, `x.gz`). Pure but
//! for one memo per thread: the last value read (`accepted`).

use std::cell::RefCell;

use peregrine::codec::accept::{self, Weights, STAR};

/// A content coding Peregrine can serve from a pre-compressed sibling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Encoding {
    /// `br`, from `NAME.br`.
    Brotli,
    /// `zstd`, from `NAME.zst`.
    Zstd,
    /// `gzip`, from `NAME.gz`.
    Gzip,
}

impl Encoding {
    /// In order of preference when the client likes several equally: the
    /// smallest output first.
    pub const ALL: [Encoding; 3] = [Encoding::Brotli, Encoding::Zstd, Encoding::Gzip];

    /// The coding's name in `Content-Encoding` (IANA registry).
    pub fn name(self) -> &'static str {
        match self {
            Encoding::Brotli => "br",
            Encoding::Zstd => "zstd",
            Encoding::Gzip => "gzip",
        }
    }

    /// The file name suffix of a sibling in this coding.
    pub fn suffix(self) -> &'static str {
        match self {
            Encoding::Brotli => ".br",
            Encoding::Zstd => ".zst",
            Encoding::Gzip => ".gz",
        }
    }

    /// The coding's index in [`accept::Weights`].
    fn index(self) -> usize {
        match self {
            Encoding::Brotli => accept::BROTLI,
            Encoding::Zstd => accept::ZSTD,
            Encoding::Gzip => accept::GZIP,
        }
    }
}

/// Picks the coding to send, among `available`, for an `Accept-Encoding`
/// value (`None`: the field is absent, so identity). `None` means identity.
///
/// The highest q-value wins, ties going to the order of [`Encoding::ALL`];
/// a coding with q=0 is never chosen; `*` gives its q-value to the codings
/// the field does not name. When the client refuses identity too
/// (`identity;q=0`) and offers nothing available, identity is sent anyway,
/// as nginx and Caddy do (RFC 9110 §12.5.3 allows disregarding the field).
pub fn negotiate(accept: Option<&[u8]>, available: &[Encoding]) -> Option<Encoding> {
    // Nothing to choose (a file without compressed siblings: an image):
    // the value is not read (about 400 instructions for a browser's).
    if available.is_empty() {
        return None;
    }
    accepted(accept).choose(available)
}

/// What an `Accept-Encoding` value accepts, read once: then asked which
/// coding to send ([`Accepted::choose`], what [`negotiate`] answers) or
/// whether one coding is acceptable ([`Accepted::contains`]) as often as
/// needed. A revalidation asks about each coding in turn (the variant the
/// client holds), where a `negotiate` per coding read the value each time
/// (about 450 instructions each for `gzip, deflate, br, zstd`).
///
/// The last value read on this thread is remembered with what it accepts
/// (up to `MEMO_BYTES`): a browser sends the same value with every request,
/// and comparing it costs a fraction of reading it (`LAST`).
pub fn accepted(accept: Option<&[u8]>) -> Accepted {
    let Some(accept) = accept else {
        return Accepted(Weights::Absent);
    };
    let n = accept.len();
    if n > MEMO_BYTES {
        return accepted_afresh(accept);
    }
    LAST.with(|last| {
        // Never borrowed twice: nothing here calls back into `accepted`.
        let mut memo = last.borrow_mut();
        if usize::from(memo.len) == n && same_bytes(&memo.bytes, accept) {
            return memo.accepted;
        }
        let accepted = accepted_afresh(accept);
        memo.len = n as u8;
        memo.bytes[..n].copy_from_slice(accept);
        memo.accepted = accepted;
        accepted
    })
}

/// Whether `value` is the first `value.len()` bytes of `kept`, eight
/// bytes at a time, the last word the last eight bytes (read again in
/// part): a slice compare was a call of `memcmp` (about 50 instructions
/// with its setup, for 23 bytes).
#[inline(always)]
fn same_bytes(kept: &[u8; MEMO_BYTES], value: &[u8]) -> bool {
    let n = value.len();
    if n < 8 {
        return kept.iter().zip(value).all(|(a, b)| a == b);
    }
    let word = |b: &[u8], at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or_default());
    let mut at = 0;
    while at + 8 < n {
        if word(kept, at) != word(value, at) {
            return false;
        }
        at += 8;
    }
    word(kept, n - 8) == word(value, n - 8)
}

/// The longest value [`accepted`] remembers: every browser's fits
/// (Chrome's and Firefox's `gzip, deflate, br, zstd` is 23 bytes).
const MEMO_BYTES: usize = 48;

/// A value [`accepted`] read and what it accepts.
struct Memo {
    /// The value's length; `u8::MAX` (longer than `MEMO_BYTES`) while none
    /// is remembered.
    len: u8,
    bytes: [u8; MEMO_BYTES],
    accepted: Accepted,
}

thread_local! {
    /// The last `Accept-Encoding` value [`accepted`] read on this thread
    /// (a worker: its connections' requests in turn). Read afresh, Chrome's
    /// value cost `accepted` 368 instructions; found here, 60 (a browser's
    /// archive answer 2,688 -> 2,367, callgrind c50,
    /// bench/runs/2026-11-28-host8c). One entry, not a table: a worker's
    /// clients are mostly of one browser family or two, and a miss costs
    /// the compare and the copy beside the read.
    static LAST: RefCell<Memo> = const {
        RefCell::new(Memo { len: u8::MAX, bytes: [0; MEMO_BYTES], accepted: Accepted(Weights::Absent) })
    };
}

/// [`accepted`] without its memo: the value read, every time (the model
/// its memo is checked against, in tests and the `accept_encoding` fuzz
/// target).
#[doc(hidden)]
pub fn accepted_afresh(accept: &[u8]) -> Accepted {
    Accepted(accept::weights(Some(accept)))
}

/// An `Accept-Encoding` value as read by [`accepted`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Accepted(Weights);

impl Accepted {
    /// The coding to send among `available` ([`negotiate`]'s answer).
    #[inline]
    pub fn choose(&self, available: &[Encoding]) -> Option<Encoding> {
        match &self.0 {
            Weights::Absent => None,
            Weights::Plain(named) => choose_plainly(*named, available),
            Weights::Weighted(named, star) => choose(named, *star, available),
        }
    }

    /// Whether `e` is acceptable (q > 0, by name or by `*`): exactly
    /// when `choose(&[e])` is `Some(e)`.
    #[inline]
    pub fn contains(&self, e: Encoding) -> bool {
        self.0.q(e.index()) > 0
    }
}

/// Every coding's bit.
const ALL_CODINGS: u8 = 0b111;

/// `choose` for a value without parameters, every coding it names (and
/// `*`) at q=1: the first of [`Encoding::ALL`] available and named (or
/// any available, with `*`). Sets, not q-values compared per coding
/// (`choose`'s loop with `available.contains`: about 90 instructions).
#[inline(always)]
fn choose_plainly(named: u8, available: &[Encoding]) -> Option<Encoding> {
    let mut offered = 0u8;
    for e in available {
        offered |= 1 << e.index();
    }
    let wanted = if named & STAR != 0 { ALL_CODINGS } else { named };
    match offered & wanted {
        0 => None,
        both => Some(Encoding::ALL[both.trailing_zeros() as usize]),
    }
}

/// The coding of the highest q-value among `available` (`named`: each
/// coding's q-value in thousandths if the field named it; `star`: `*`'s),
/// ties to the order of [`Encoding::ALL`], never one of q=0.
fn choose(named: &[Option<u16>; 3], star: Option<u16>, available: &[Encoding]) -> Option<Encoding> {
    let mut best: Option<(u16, Encoding)> = None;
    for e in Encoding::ALL {
        if !available.contains(&e) {
            continue;
        }
        let q = named[e.index()].or(star).unwrap_or(0);
        if q > 0 && best.is_none_or(|(bq, _)| q > bq) {
            best = Some((q, e));
        }
    }
    best.map(|(_, e)| e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use peregrine::codec::accept::qvalue;
    use peregrine::codec::head::trim_ows;
    use Encoding::*;

    #[test]
    fn the_best_acceptable_sibling_is_chosen() {
        let all = &[Brotli, Zstd, Gzip][..];
        let gz = &[Gzip][..];
        let table: &[(Option<&str>, &[Encoding], Option<Encoding>)] = &[
            (None, all, None),
            (Some(""), all, None),
            (Some("gzip, deflate, br, zstd"), all, Some(Brotli)),
            (Some("gzip, deflate, br"), &[Zstd, Gzip], Some(Gzip)),
            (Some("gzip;q=1.0, br;q=0.5"), all, Some(Gzip)),
            (Some("br;q=0, gzip"), all, Some(Gzip)),
            (Some("BR"), all, Some(Brotli)),
            (Some("zstd"), all, Some(Zstd)),
            // `zst` is the file suffix, not the coding's name.
            (Some("zst"), all, None),
            (Some("x-gzip"), gz, Some(Gzip)),
            (Some("*"), all, Some(Brotli)),
            (Some("*;q=0.5, br;q=0"), all, Some(Zstd)),
            (Some("*;q=0"), all, None),
            (Some("identity;q=0"), gz, None),
            (Some("identity;q=0, gzip"), gz, Some(Gzip)),
            (Some("gzip;q=0.001"), gz, Some(Gzip)),
            (Some("gzip;q=0.000"), gz, None),
            (Some("gzip;q=2"), gz, None),
            (Some("gzip;q=0.5, br;q=0.501"), all, Some(Brotli)),
            (Some("gzip ; q=0.5 , deflate"), gz, Some(Gzip)),
            (Some("deflate"), gz, None),
            (Some("gzip"), &[], None),
            // Named twice: the highest q-value, as Caddy and nginx read it
            // (and the proxy's compression).
            (Some("gzip, gzip;q=0"), gz, Some(Gzip)),
            (Some("br;q=0, br;q=0.1, gzip;q=0.05"), all, Some(Brotli)),
        ];
        for (accept, available, want) in table {
            assert_eq!(
                negotiate(accept.map(str::as_bytes), available),
                *want,
                "{accept:?} among {available:?}"
            );
        }
    }

    /// The negotiation as first written (split into elements, then
    /// parameters; each coding compared by name): the model the one-pass
    /// scan must agree with.
    fn negotiate_split(accept: &[u8], available: &[Encoding]) -> Option<Encoding> {
        let mut named: [Option<u16>; 3] = [None; 3];
        let mut star: Option<u16> = None;
        for element in accept.split(|&b| b == b',') {
            let mut params = element.split(|&b| b == b';');
            let coding = trim_ows(params.next().unwrap_or_default());
            if coding.is_empty() {
                continue;
            }
            let mut q = 1000;
            for param in params {
                let param = trim_ows(param);
                if let Some(v) = param.strip_prefix(b"q=").or_else(|| param.strip_prefix(b"Q=")) {
                    q = qvalue(v).unwrap_or(0);
                }
            }
            let slot = if coding.eq_ignore_ascii_case(b"br") {
                Some(Brotli)
            } else if coding.eq_ignore_ascii_case(b"zstd") {
                Some(Zstd)
            } else if coding.eq_ignore_ascii_case(b"gzip") || coding.eq_ignore_ascii_case(b"x-gzip") {
                Some(Gzip)
            } else if coding == b"*" {
                star = Some(star.map_or(q, |old| old.max(q)));
                None
            } else {
                None
            };
            // Named twice: the highest q-value.
            if let Some(e) = slot {
                named[e.index()] = Some(named[e.index()].map_or(q, |old| old.max(q)));
            }
        }
        // The choice among the q-values is the code's own (`choose`):
        // what this model checks is the scan that finds them.
        choose(&named, star, available)
    }

    /// Random values over the bytes that matter (the names in both cases,
    /// their neighbours in the case-bit sense, separators, blanks,
    /// q-values) and any byte: the one-pass scan chooses as the split did,
    /// for every set of codings available.
    #[test]
    fn the_one_pass_scan_chooses_as_the_split_did() {
        const PIECES: &[&[u8]] = &[
            b"br",
            b"BR",
            b"bR",
            b"gzip",
            b"GZIP",
            b"gZiP",
            b"zstd",
            b"ZSTD",
            b"x-gzip",
            b"X-GZIP",
            b"x\rgzip",
            b"deflate",
            b"identity",
            b"*",
            b",",
            b",",
            b";",
            b";",
            b" ",
            b"\t",
            b"q=",
            b"Q=",
            b"q =",
            b"0",
            b"1",
            b".",
            b"5",
            b"000",
            b"0.5",
            b"1.0",
            b"1.001",
            b"b",
            b"r",
            b"gzi",
            b"zst",
            b"\x02r",
            b"B\x12",
            b"",
        ];
        let sets: [&[Encoding]; 8] = [
            &[],
            &[Brotli],
            &[Zstd],
            &[Gzip],
            &[Brotli, Zstd],
            &[Brotli, Gzip],
            &[Zstd, Gzip],
            &[Brotli, Zstd, Gzip],
        ];
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for i in 0..200_000 {
            let mut value = Vec::new();
            for _ in 0..next() % 12 {
                let r = next();
                if r % 9 == 0 {
                    value.push((r >> 8) as u8);
                } else {
                    value.extend_from_slice(PIECES[(r >> 8) as usize % PIECES.len()]);
                }
            }
            let available = sets[i % sets.len()];
            // Half the values without parameters, for the plain scan.
            if i % 2 == 0 {
                value.retain(|&b| b != b';');
            }
            assert_eq!(
                negotiate(Some(&value), available),
                negotiate_split(&value, available),
                "{:?} among {available:?}",
                String::from_utf8_lossy(&value)
            );
            // `accepted` holds a coding exactly when it alone is chosen.
            let set = accepted(Some(&value));
            for e in Encoding::ALL {
                assert_eq!(
                    set.contains(e),
                    negotiate_split(&value, &[e]) == Some(e),
                    "{:?} {e:?}",
                    String::from_utf8_lossy(&value)
                );
            }
        }
        assert!(Encoding::ALL.iter().all(|&e| !accepted(None).contains(e)));
    }

    /// The memo answers as a fresh read, whatever came before: values of
    /// the same length that differ in one byte, a value after a longer
    /// one, the empty value, values longer than the memo, each repeated
    /// and interleaved.
    #[test]
    fn the_remembered_value_answers_as_a_fresh_read() {
        let values: &[&[u8]] = &[
            b"gzip, deflate, br, zstd",
            b"gzip, deflate, br, zstx",
            b"gzip, deflate, br, zst",
            b"xzip, deflate, br, zstd",
            b"gzip, deflate, br",
            b"",
            b"br;q=0, gzip",
            b"br;q=0, gzix",
            b"*",
            b"*;q=0",
            b"identity",
            b"gzip;q=0.5, br;q=0.9, zstd;q=0.1, deflate, identity;q=0",
            b"gzip;q=0.5, br;q=0.9, zstd;q=0.1, deflate, identity;q=1",
        ];
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        for _ in 0..5_000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let v = values[(seed >> 32) as usize % values.len()];
            for _ in 0..1 + seed % 3 {
                assert_eq!(
                    accepted(Some(v)),
                    accepted_afresh(v),
                    "{:?}",
                    String::from_utf8_lossy(v)
                );
            }
        }
        // A value that differs from the remembered one only past its
        // length is not taken for it.
        assert_eq!(accepted(Some(b"gzip, br")), accepted_afresh(b"gzip, br"));
        assert_eq!(accepted(Some(b"gzip")), accepted_afresh(b"gzip"));
        assert_ne!(accepted(Some(b"br")), accepted(Some(b"gzip")));
    }
}
