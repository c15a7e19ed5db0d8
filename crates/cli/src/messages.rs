//! Wording the commands' messages share.

/// `1 key`, `2 keys`.
pub(crate) fn counted(n: usize, noun: &str) -> String {
    format!("{n} {noun}{}", if n == 1 { "" } else { "s" })
}

/// An error with its causes, on one line.
pub(crate) fn one_line(e: &anyhow::Error) -> String {
    format!("{e:#}").replace('\n', "; ")
}
