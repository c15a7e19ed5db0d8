//! Content types by file name: mime_guess's table (the shared-mime-info
//! and Apache lists), with `charset=utf-8` added to the textual types.

/// The `Content-Type` for a file name.
pub fn content_type(name: &str) -> String {
    let ext = name.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase());
    let guess = match ext.as_deref() {
        // RFC 9239 made text/javascript the one type for JavaScript.
        Some("js" | "mjs" | "cjs") => Some("text/javascript"),
        Some("webmanifest") => Some("application/manifest+json"),
        Some("avif") => Some("image/avif"),
        _ => mime_guess::from_path(name).first_raw(),
    };
    let Some(guess) = guess else {
        return "application/octet-stream".to_owned();
    };
    if is_text(guess) {
        format!("{guess}; charset=utf-8")
    } else {
        guess.to_owned()
    }
}

/// Types a browser decodes as text, whose charset it would otherwise guess.
fn is_text(mime: &str) -> bool {
    mime.starts_with("text/")
        || matches!(
            mime,
            "application/javascript"
                | "application/json"
                | "application/xml"
                | "application/manifest+json"
                | "application/ld+json"
                | "application/xhtml+xml"
                | "application/rss+xml"
                | "application/atom+xml"
                | "image/svg+xml"
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn common_types_are_right() {
        let table = [
            ("index.html", "text/html; charset=utf-8"),
            ("a.css", "text/css; charset=utf-8"),
            ("a.js", "text/javascript; charset=utf-8"),
            ("a.mjs", "text/javascript; charset=utf-8"),
            ("a.json", "application/json; charset=utf-8"),
            ("a.svg", "image/svg+xml; charset=utf-8"),
            ("a.png", "image/png"),
            ("a.woff2", "font/woff2"),
            ("a.wasm", "application/wasm"),
            ("A.JS", "text/javascript; charset=utf-8"),
            ("site.webmanifest", "application/manifest+json; charset=utf-8"),
            ("a.avif", "image/avif"),
            ("a.webp", "image/webp"),
            ("a.txt", "text/plain; charset=utf-8"),
            ("a.xml", "text/xml; charset=utf-8"),
            ("a.pdf", "application/pdf"),
            ("README", "application/octet-stream"),
            ("a.unknownext", "application/octet-stream"),
        ];
        for (name, want) in table {
            assert_eq!(content_type(name), want, "{name}");
        }
    }
}
