//! Content negotiation on `Accept-Encoding` (RFC 9110 §12.5.3) among the
//! pre-compressed siblings a file has (`x.br`, `x.zst`, `x.gz`). Pure.

use peregrine::codec::head::trim_ows;

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

    fn index(self) -> usize {
        self as usize
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
    let accept = accept?;
    // q-values in thousandths, per coding; None: not named.
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
            Some(Encoding::Brotli)
        } else if coding.eq_ignore_ascii_case(b"zstd") {
            Some(Encoding::Zstd)
        } else if coding.eq_ignore_ascii_case(b"gzip") || coding.eq_ignore_ascii_case(b"x-gzip") {
            Some(Encoding::Gzip)
        } else if coding == b"*" {
            star = Some(q);
            None
        } else {
            None
        };
        if let Some(e) = slot {
            named[e.index()] = Some(q);
        }
    }
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

/// qvalue = ( "0" [ "." 0*3DIGIT ] ) / ( "1" [ "." 0*3("0") ] ), in
/// thousandths. Invalid → None (treated as 0: not acceptable).
fn qvalue(v: &[u8]) -> Option<u16> {
    let v = trim_ows(v);
    let (int, frac) = match v.iter().position(|&b| b == b'.') {
        Some(dot) => (&v[..dot], &v[dot + 1..]),
        None => (v, &b""[..]),
    };
    if frac.len() > 3 || !frac.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut thousandths = 0u16;
    for i in 0..3 {
        thousandths = thousandths * 10 + frac.get(i).map_or(0, |d| u16::from(d - b'0'));
    }
    match int {
        b"0" => Some(thousandths),
        b"1" if thousandths == 0 => Some(1000),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
        ];
        for (accept, available, want) in table {
            assert_eq!(
                negotiate(accept.map(str::as_bytes), available),
                *want,
                "{accept:?} among {available:?}"
            );
        }
    }
}
