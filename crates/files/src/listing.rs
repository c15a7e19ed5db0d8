//! Directory listings (`--list-dirs`), as Caddy's `browse`: names with
//! sizes and modification times, sortable (`?sort=name|size|time&order=
//! asc|desc`), as HTML for people and as JSON or plain text for programs
//! (`Accept: application/json` or `text/plain`, or `?format=json|text|
//! html`, the query winning). Names are HTML-escaped and percent-encoded
//! in links; dotfiles, the rule files (`_headers`, `_redirects`) and
//! pre-compressed siblings (`x.js.gz` beside `x.js`) are never listed.
//! Every listing is sent with [`CSP`], so even a name that escaping missed
//! could run no script. Read from the open directory itself
//! (`/proc/self/fd/N`), so the listing is of the directory that was
//! opened beneath the root.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::time::UNIX_EPOCH;

use crate::encoding::Encoding;

/// Entries listed at most; a bigger directory is cut off with a note.
pub const ENTRIES_MAX: usize = 100_000;

/// The Content-Security-Policy of every listing: no script, no fetch, no
/// frame; only the page's own inline style.
pub const CSP: &str = "default-src 'none'; style-src 'unsafe-inline'";

/// The form a listing is sent in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Html,
    Json,
    Text,
}

impl Format {
    /// The form asked for: `?format=` if given, else the first of JSON or
    /// plain text that `Accept` names, else HTML (a browser's Accept
    /// names `text/html` first, and falls to HTML either way).
    pub fn asked(query: Option<&str>, accept: Option<&str>) -> Format {
        match param(query, "format") {
            Some("json") => return Format::Json,
            Some("text") => return Format::Text,
            Some("html") => return Format::Html,
            _ => {}
        }
        let accept = accept.unwrap_or_default().to_ascii_lowercase();
        let at = |t: &str| accept.find(t).unwrap_or(usize::MAX);
        let (html, json, text) = (at("text/html"), at("application/json"), at("text/plain"));
        if json < html && json <= text {
            Format::Json
        } else if text < html && text < json {
            Format::Text
        } else {
            Format::Html
        }
    }

    /// The Content-Type of a listing in this form.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Html => "text/html; charset=utf-8",
            Format::Json => "application/json",
            Format::Text => "text/plain; charset=utf-8",
        }
    }
}

/// What a listing is sorted by, directories always first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    Name,
    Size,
    Time,
}

/// The sort asked for: `?sort=name|size|time&order=asc|desc` (Caddy's
/// names); by name, ascending, unless the query says otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Order {
    pub key: Key,
    pub descending: bool,
}

impl Order {
    /// The order a query asks for; unknown values are ignored.
    pub fn asked(query: Option<&str>) -> Order {
        Order {
            key: match param(query, "sort") {
                Some("size") => Key::Size,
                Some("time") => Key::Time,
                _ => Key::Name,
            },
            descending: param(query, "order") == Some("desc"),
        }
    }
}

/// The value of `name` in a raw query, if given (listing parameters are
/// plain words: no decoding needed).
fn param<'q>(query: Option<&'q str>, name: &str) -> Option<&'q str> {
    query?.split('&').find_map(|pair| {
        let (n, v) = pair.split_once('=')?;
        (n == name).then_some(v)
    })
}

/// One listed name.
struct Item {
    name: String,
    is_dir: bool,
    /// Bytes; `None` for a directory or a symlink (whose target's size
    /// is not read: it may lie outside the root).
    size: Option<u64>,
    /// Seconds since the epoch; `None` for a symlink, as for `size`.
    mtime: Option<u64>,
}

/// Whether `name`, in a directory holding `names`, is never listed.
fn is_left_out(name: &str, names: &[String]) -> bool {
    name.starts_with('.')
        || matches!(name, "_headers" | "_redirects")
        || Encoding::ALL.iter().any(|e| {
            name.strip_suffix(e.suffix())
                .is_some_and(|base| names.iter().any(|n| n == base))
        })
}

/// The listing of `dir`, shown at site path `site_path` (ending `/`), in
/// `format` and `order`. `precompressed`: siblings are variants (left
/// out), as `serve DIR` serves them.
pub fn render(dir: &File, site_path: &str, format: Format, order: Order, precompressed: bool) -> io::Result<String> {
    let mut entries = Vec::new();
    let mut truncated = false;
    for entry in std::fs::read_dir(format!("/proc/self/fd/{}", dir.as_raw_fd()))? {
        let entry = entry?;
        let Ok(name) = entry.file_name().into_string() else {
            continue; // Not UTF-8: not reachable by a request either.
        };
        if entries.len() >= ENTRIES_MAX {
            truncated = true;
            break;
        }
        entries.push((name, entry));
    }
    let names: Vec<String> = entries.iter().map(|(n, _)| n.clone()).collect();
    let mut items: Vec<Item> = Vec::with_capacity(entries.len());
    for (name, entry) in entries {
        let hidden = if precompressed {
            is_left_out(&name, &names)
        } else {
            is_left_out(&name, &[])
        };
        if hidden {
            continue;
        }
        // lstat through the directory: a symlink's own, not its target's.
        let meta = entry.metadata().ok();
        let is_link = meta.as_ref().is_some_and(|m| m.file_type().is_symlink());
        let is_dir = if is_link {
            std::fs::metadata(entry.path()).is_ok_and(|m| m.is_dir())
        } else {
            meta.as_ref().is_some_and(|m| m.is_dir())
        };
        let known = meta.filter(|_| !is_link);
        items.push(Item {
            name,
            is_dir,
            size: known.as_ref().filter(|m| m.is_file()).map(|m| m.len()),
            mtime: known
                .and_then(|m| m.modified().ok())
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .map(|d| d.as_secs()),
        });
    }
    sort(&mut items, order);
    Ok(match format {
        Format::Html => html(&items, site_path, order, truncated),
        Format::Json => json(&items),
        Format::Text => text(&items),
    })
}

/// Directories first, then by the key (names breaking ties), reversed
/// within each group for a descending order.
fn sort(items: &mut [Item], order: Order) {
    items.sort_by(|a, b| {
        let by_key = match order.key {
            Key::Name => std::cmp::Ordering::Equal,
            Key::Size => a.size.cmp(&b.size),
            Key::Time => a.mtime.cmp(&b.mtime),
        }
        .then_with(|| a.name.cmp(&b.name));
        b.is_dir
            .cmp(&a.is_dir)
            .then(if order.descending { by_key.reverse() } else { by_key })
    });
}

/// A link to an item, relative to the listing: percent-encoded, then
/// escaped for an attribute.
fn href(item: &Item) -> String {
    let mut link = format!("./{}", crate::path::encode(&item.name));
    if item.is_dir {
        link.push('/');
    }
    link
}

fn html(items: &[Item], site_path: &str, order: Order, truncated: bool) -> String {
    let title = escape(site_path);
    let mut out = String::with_capacity(512 + 160 * items.len());
    out.push_str("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>Index of ");
    out.push_str(&title);
    out.push_str("</title>\n<style>td{padding:0 1em 0 0}td.n{text-align:right}</style></head>\n<body><h1>Index of ");
    out.push_str(&title);
    out.push_str("</h1>\n<table>\n<tr>");
    for (key, label) in [(Key::Name, "Name"), (Key::Size, "Size"), (Key::Time, "Modified")] {
        // A column's link sorts by it, the other way round if it is the
        // current sort (as Caddy's headers do).
        let descending = order.key == key && !order.descending;
        let sort = match key {
            Key::Name => "name",
            Key::Size => "size",
            Key::Time => "time",
        };
        let dir = if descending { "desc" } else { "asc" };
        out.push_str(&format!(
            "<th><a href=\"?sort={sort}&amp;order={dir}\">{label}</a></th>"
        ));
    }
    out.push_str("</tr>\n");
    if site_path != "/" {
        out.push_str("<tr><td><a href=\"../\">../</a></td><td></td><td></td></tr>\n");
    }
    for item in items {
        let slash = if item.is_dir { "/" } else { "" };
        out.push_str("<tr><td><a href=\"");
        out.push_str(&escape(&href(item)));
        out.push_str("\">");
        out.push_str(&escape(&item.name));
        out.push_str(slash);
        out.push_str("</a></td><td class=\"n\">");
        if let Some(size) = item.size {
            out.push_str(&size.to_string());
        }
        out.push_str("</td><td>");
        if let Some(t) = item.mtime {
            out.push_str(&httpdate::fmt_http_date(UNIX_EPOCH + std::time::Duration::from_secs(t)));
        }
        out.push_str("</td></tr>\n");
    }
    out.push_str("</table>\n");
    if truncated {
        out.push_str("<p>(listing cut off at 100,000 entries)</p>\n");
    }
    out.push_str("</body></html>\n");
    out
}

/// Caddy's fields: `name`, `url`, `is_dir`, `size` (bytes, absent for a
/// directory or symlink), `mod_time` (RFC 3339, UTC, absent likewise).
fn json(items: &[Item]) -> String {
    let mut out = String::from("[");
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str("\n{\"name\":");
        json_string(&mut out, &item.name);
        out.push_str(",\"url\":");
        json_string(&mut out, &href(item));
        out.push_str(",\"is_dir\":");
        out.push_str(if item.is_dir { "true" } else { "false" });
        if let Some(size) = item.size {
            out.push_str(&format!(",\"size\":{size}"));
        }
        if let Some(t) = item.mtime {
            out.push_str(",\"mod_time\":");
            json_string(&mut out, &rfc3339(t));
        }
        out.push('}');
    }
    out.push_str("\n]\n");
    out
}

/// One line per item: name (a directory's with `/`), size (`-` for none),
/// modification time (RFC 3339, `-` for none), separated by tabs. A name
/// holding a tab or a line break is written as a JSON string would be,
/// so that each line stays one item.
fn text(items: &[Item]) -> String {
    let mut out = String::new();
    for item in items {
        let mut name = item.name.clone();
        if name.contains(['\t', '\n', '\r']) {
            name.clear();
            json_string(&mut name, &item.name);
        }
        if item.is_dir {
            name.push('/');
        }
        let size = item.size.map_or("-".to_owned(), |s| s.to_string());
        let time = item.mtime.map_or("-".to_owned(), rfc3339);
        out.push_str(&format!("{name}\t{size}\t{time}\n"));
    }
    out
}

/// `s` as a JSON string, quotes included.
fn json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            // `<` too, so that a listing read as HTML by mistake holds no
            // tag.
            c if (c as u32) < 0x20 || c == '<' || c == '>' || c == '&' => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Seconds since the epoch as RFC 3339 in UTC (`2024-05-06T07:08:09Z`).
fn rfc3339(secs: u64) -> String {
    let days = secs / 86_400;
    let rem = secs % 86_400;
    // Howard Hinnant's civil-from-days, for days since 1970-01-01.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Escapes text for HTML content and attribute values.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_in_names_is_escaped() {
        assert_eq!(
            escape("<a href='x'>&\"</a>"),
            "&lt;a href=&#39;x&#39;&gt;&amp;&quot;&lt;/a&gt;"
        );
    }

    #[test]
    fn dates_are_rfc3339_in_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_714_979_289), "2024-05-06T07:08:09Z");
    }

    #[test]
    fn the_format_follows_the_query_then_accept() {
        let browser = Some("text/html,application/xhtml+xml,application/json;q=0.9,*/*;q=0.8");
        assert_eq!(Format::asked(None, browser), Format::Html);
        assert_eq!(Format::asked(None, Some("application/json")), Format::Json);
        assert_eq!(Format::asked(None, Some("text/plain")), Format::Text);
        assert_eq!(Format::asked(None, None), Format::Html);
        assert_eq!(Format::asked(Some("format=json"), browser), Format::Json);
        assert_eq!(Format::asked(Some("a=1&format=text"), None), Format::Text);
    }

    #[test]
    fn directories_come_first_then_the_key_in_its_order() {
        let item = |name: &str, is_dir: bool, size: u64| Item {
            name: name.into(),
            is_dir,
            size: (!is_dir).then_some(size),
            mtime: Some(size),
        };
        let mut items = vec![
            item("b", false, 1),
            item("a", false, 3),
            item("z", true, 0),
            item("c", false, 2),
        ];
        let names = |items: &[Item]| items.iter().map(|i| i.name.clone()).collect::<Vec<_>>();
        sort(&mut items, Order::asked(Some("sort=size&order=desc")));
        assert_eq!(names(&items), ["z", "a", "c", "b"]);
        sort(&mut items, Order::asked(Some("sort=time")));
        assert_eq!(names(&items), ["z", "b", "c", "a"]);
        sort(&mut items, Order::asked(None));
        assert_eq!(names(&items), ["z", "a", "b", "c"]);
    }

    #[test]
    fn siblings_rule_files_and_dotfiles_are_left_out() {
        let names: Vec<String> = ["x.js", "x.js.gz", "y.gz", ".env", "_headers"]
            .map(String::from)
            .to_vec();
        let out: Vec<&String> = names.iter().filter(|n| !is_left_out(n, &names)).collect();
        assert_eq!(out, ["x.js", "y.gz"]);
    }

    #[test]
    fn json_strings_escape_quotes_controls_and_markup() {
        let mut out = String::new();
        json_string(&mut out, "a\"b\\c\n<script>");
        assert_eq!(out, r#""a\"b\\c\u000a\u003cscript\u003e""#);
    }
}
