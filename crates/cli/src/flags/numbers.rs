//! Value parsers for numbers that must lie in a range: counts and byte
//! sizes (`within`), and seconds with fractions (`seconds_within`, and
//! `seconds_or_suffixed_within`, which also takes `60s`).

use std::ops::RangeInclusive;
use std::time::Duration;

/// A value parser for a number that must lie in `range` (limits.rs says
/// why each range is what it is). Used by the config file and variables
/// too, so that a value out of range is named with its file and line.
pub(crate) fn within<T>(range: RangeInclusive<T>) -> impl Fn(&str) -> Result<T, String> + Clone + Send + Sync + 'static
where
    T: std::str::FromStr + PartialOrd + std::fmt::Display + Clone + Send + Sync + 'static,
    T::Err: std::fmt::Display,
{
    move |s: &str| {
        let v: T = s.parse().map_err(|e| {
            // A number the type cannot hold (`-5` for a count,
            // 99999999999999999999) is out of range, and the range is what
            // helps; anything else is not a number at all.
            if s.parse::<i128>().is_ok() {
                format!("{s} is out of range: from {} to {}", range.start(), range.end())
            } else {
                format!("{s:?} is not a whole number: {e}")
            }
        })?;
        if !range.contains(&v) {
            return Err(format!(
                "{v} is out of range: from {} to {}",
                range.start(),
                range.end()
            ));
        }
        Ok(v)
    }
}

/// A value parser for a size in bytes that must lie in `range`: a whole
/// number, or one with `K`, `M` or `G` after it (KiB, MiB, GiB, as
/// nginx's sizes read: `64M`).
pub(crate) fn size_within(
    range: RangeInclusive<u64>,
) -> impl Fn(&str) -> Result<u64, String> + Clone + Send + Sync + 'static {
    move |s: &str| {
        let (digits, unit) = match s.as_bytes().last() {
            Some(b'k' | b'K') => (&s[..s.len() - 1], 1u64 << 10),
            Some(b'm' | b'M') => (&s[..s.len() - 1], 1 << 20),
            Some(b'g' | b'G') => (&s[..s.len() - 1], 1 << 30),
            _ => (s, 1),
        };
        let n: u64 = digits
            .parse()
            .map_err(|_| format!("{s:?} is not a size: bytes, or a number and K, M or G (64M)"))?;
        match n.checked_mul(unit) {
            Some(v) if range.contains(&v) => Ok(v),
            _ => Err(format!(
                "{s} is out of range: from {} to {} bytes",
                range.start(),
                range.end()
            )),
        }
    }
}

/// A value parser for seconds (fractions allowed) that must lie in `range`.
pub(crate) fn seconds_within(
    range: RangeInclusive<Duration>,
) -> impl Fn(&str) -> Result<f64, String> + Clone + Send + Sync + 'static {
    move |s: &str| {
        let v: f64 = s.parse().map_err(|e| format!("{e}"))?;
        match Duration::try_from_secs_f64(v) {
            Ok(d) if range.contains(&d) => Ok(v),
            _ => Err(format!(
                "{v} is out of range: from {} to {} seconds",
                range.start().as_secs_f64(),
                range.end().as_secs_f64()
            )),
        }
    }
}

/// As `seconds_within`, also taking the seconds with an `s` after them
/// (`60s`), as the flags for durations that read as "keep it for" are
/// written in the docs.
pub(crate) fn seconds_or_suffixed_within(
    range: RangeInclusive<Duration>,
) -> impl Fn(&str) -> Result<f64, String> + Clone + Send + Sync + 'static {
    let plain = seconds_within(range);
    move |s: &str| plain(s.strip_suffix('s').unwrap_or(s))
}
