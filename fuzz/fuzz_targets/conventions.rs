//! `_headers` and `_redirects` files (what `pack` compiles) on arbitrary
//! bytes: never panics; what is accepted is well formed (patterns and FROM
//! start with `/`, fields make a valid header block, statuses are
//! redirects), and the patterns can be matched and substituted.
#![no_main]

use libfuzzer_sys::fuzz_target;
use peregrine_archive::pack::{parse_headers, parse_redirects};
use peregrine_archive::pattern::{matches, substitute};

const PATHS: [&str; 4] = ["/", "/a/b.html", "/blog/2024/post", "/assets/x/y.css"];

fuzz_target!(|text: &[u8]| {
    if let Ok(rules) = parse_headers(text) {
        for (pattern, fields) in &rules {
            assert!(pattern.starts_with('/'));
            let fields: Vec<(&str, &str)> = fields.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
            peregrine::HeaderBlock::new(&fields).expect("accepted fields are valid");
            for path in PATHS {
                let _ = matches(pattern, path);
            }
        }
    }
    if let Ok(redirects) = parse_redirects(text) {
        for r in &redirects {
            assert!(r.from.starts_with('/'));
            assert!(matches!(r.status, 301 | 302 | 307 | 308));
            for path in PATHS {
                if let Some(caps) = matches(&r.from, path) {
                    let _ = substitute(&r.to, &caps);
                }
            }
        }
    }
});
