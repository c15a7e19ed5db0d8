//! HTML directory listings (`--list-dirs`): names escaped, links
//! percent-encoded, directories first, each group sorted by name; dotfiles
//! left out. Read from the open directory itself (`/proc/self/fd/N`), so the
//! listing is of the directory that was opened beneath the root.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// Entries listed at most; a bigger directory is cut off with a note.
pub const ENTRIES_MAX: usize = 100_000;

/// The listing page of `dir`, shown at site path `site_path` (ending `/`).
pub fn render(dir: &File, site_path: &str) -> io::Result<String> {
    let mut dirs: Vec<String> = Vec::new();
    let mut files: Vec<String> = Vec::new();
    let mut truncated = false;
    for entry in std::fs::read_dir(format!("/proc/self/fd/{}", dir.as_raw_fd()))? {
        let entry = entry?;
        let Ok(name) = entry.file_name().into_string() else {
            continue; // Not UTF-8: not reachable by a request either.
        };
        if name.starts_with('.') {
            continue;
        }
        if dirs.len() + files.len() >= ENTRIES_MAX {
            truncated = true;
            break;
        }
        // d_type from the directory entry: no stat per entry.
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            dirs.push(name);
        } else {
            files.push(name);
        }
    }
    dirs.sort_unstable();
    files.sort_unstable();
    let title = escape(site_path);
    let mut html = String::with_capacity(256 + 96 * (dirs.len() + files.len()));
    html.push_str("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>Index of ");
    html.push_str(&title);
    html.push_str("</title></head>\n<body><h1>Index of ");
    html.push_str(&title);
    html.push_str("</h1>\n<ul>\n");
    if site_path != "/" {
        html.push_str("<li><a href=\"../\">../</a></li>\n");
    }
    for (names, slash) in [(&dirs, "/"), (&files, "")] {
        for name in names {
            html.push_str("<li><a href=\"./");
            html.push_str(&escape(&crate::path::encode(name)));
            html.push_str(slash);
            html.push_str("\">");
            html.push_str(&escape(name));
            html.push_str(slash);
            html.push_str("</a></li>\n");
        }
    }
    html.push_str("</ul>\n");
    if truncated {
        html.push_str("<p>(listing cut off at 100,000 entries)</p>\n");
    }
    html.push_str("</body></html>\n");
    Ok(html)
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
}
