//! `_headers` and `_redirects` files (what `pack` compiles) on arbitrary
//! bytes: never panics; what is accepted is well formed (patterns and FROM
//! start with `/`, fields make a valid header block, statuses are
//! redirects, rewrites or 404s; a `Basic-Auth` line is never a field),
//! and the patterns and query conditions can
//! be matched and substituted.
#![no_main]

use libfuzzer_sys::fuzz_target;
use peregrine_archive::pack::{parse_headers, parse_redirects};
use peregrine_archive::pattern::{matches, substitute};
use peregrine_files::conventions::{rule_captures, RuleAnswer};

const PATHS: [&str; 4] = ["/", "/a/b.html", "/blog/2024/post", "/assets/x/y.css"];

fuzz_target!(|text: &[u8]| {
    if let Ok(file) = parse_headers(text) {
        // A `Basic-Auth` line is never a field, and its pattern parses.
        for (pattern, users) in &file.auth {
            assert!(peregrine::pattern::Pattern::parse(pattern).is_ok());
            assert!(!users.is_empty());
        }
        for (pattern, fields) in &file.fields {
            assert!(fields.iter().all(|(n, _)| !n.eq_ignore_ascii_case("basic-auth")));
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
            assert!(matches!(r.status, 200 | 301 | 302 | 307 | 308 | 404));
            let Ok(from) = peregrine::pattern::Pattern::parse(&r.from) else {
                panic!("an accepted FROM parses")
            };
            for path in PATHS {
                if let Some(caps) = matches(&r.from, path) {
                    let _ = substitute(&r.to, &caps);
                }
                for query in [None, Some("id=1&a=%20"), Some("&&=x")] {
                    if let Some(caps) = rule_captures(&from, &r.query, path, query) {
                        let _ = RuleAnswer::new(r.status, substitute(&r.to, &caps));
                    }
                }
            }
        }
    }
});
