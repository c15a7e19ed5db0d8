//! `_headers` and `_redirects` files (what `pack` compiles) on arbitrary
//! bytes: never panics; what is accepted is well formed (patterns and FROM
//! start with `/`, fields make a valid header block, statuses are
//! redirects, rewrites or 404s; a `Basic-Auth` line is never a field),
//! and the patterns and query conditions can
//! be matched and substituted. Proxy rules (200 to a URL) are taken only
//! for an origin on the allow list, and no capture put in moves it or
//! makes a target that is not canonical.
#![no_main]

use libfuzzer_sys::fuzz_target;
use peregrine_archive::pack::{parse_headers, parse_redirects};
use peregrine_archive::pattern::{matches, substitute};
use peregrine_files::conventions::{parse_redirects_allowing, rule_captures, substitute_rule, RuleAnswer};
use peregrine_files::proxy_rules::{canonical_target, path_start, ProxyAllow};

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
    let allow = ProxyAllow::new(
        &["https://api.example.com".to_owned(), "http://192.0.2.1:8080".to_owned()],
        &[],
    )
    .expect("a good list");
    if let Ok(redirects) = parse_redirects_allowing(text, &allow) {
        for r in redirects.iter().filter(|r| r.status == 200 && !r.to.starts_with('/')) {
            assert_eq!(allow.refusal(&r.to), None, "{}", r.to);
            let at = path_start(&r.to).expect("an accepted proxy rule is a URL");
            for path in PATHS
                .iter()
                .chain(&["/api/@evil.example/", "/api//evil", "/api/a/../b"])
            {
                let Some(caps) = matches(&r.from, path) else { continue };
                let url = substitute_rule(200, &r.to, &caps);
                assert_eq!(url[..at], r.to[..at], "the origin moved");
                if let Some(target) = canonical_target(&url[at..], Some("q=1")) {
                    let p = target.split('?').next().unwrap_or_default();
                    assert!(p.starts_with('/') && !p.starts_with("//"), "{target}");
                    assert!(!p.split('/').any(|s| s == "." || s == ".."), "{target}");
                }
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
