//! The example site committed in `site/` carries pre-compressed siblings
//! (`NAME.br`, `NAME.zst`, `NAME.gz`) so that `serve site` shows them off;
//! they must be the bytes `pack` makes (`compress::encode`, the settings
//! `serve DIR` compresses with on the fly), or `serve site` and `serve
//! site.prg` send different bodies for the same request. A file with
//! siblings has one for each coding `pack` keeps, none for the others; a
//! file without is compressed on the fly with `pack`'s settings.
//!
//! `PEREGRINE_BLESS=1 cargo test -p peregrine-files --test site` writes
//! them after an edit of the site.

use std::path::{Path, PathBuf};

use peregrine_files::compress::encode;
use peregrine_files::encoding::Encoding;
use peregrine_files::mime;

fn site() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../site")
}

/// Every file of the site that is not itself a sibling.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if !Encoding::ALL
            .iter()
            .any(|e| path.to_string_lossy().ends_with(e.suffix()))
        {
            out.push(path);
        }
    }
}

#[test]
fn the_committed_sites_siblings_are_the_bytes_pack_makes() {
    let bless = std::env::var_os("PEREGRINE_BLESS").is_some_and(|v| v == "1");
    let mut files = Vec::new();
    sources(&site(), &mut files);
    assert!(files.len() >= 5, "{files:?}");
    let mut differ = Vec::new();
    for file in files {
        let sibling_of = |coding: Encoding| PathBuf::from(format!("{}{}", file.display(), coding.suffix()));
        // A file with no sibling is compressed on the fly, as pack does.
        if !Encoding::ALL.iter().any(|&c| sibling_of(c).exists()) {
            continue;
        }
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        let body = std::fs::read(&file).unwrap();
        let made = encode(body, &mime::content_type(&name), true).unwrap();
        for coding in Encoding::ALL {
            let sibling = sibling_of(coding);
            let want = made.iter().find(|(c, _)| *c == Some(coding)).map(|(_, b)| b);
            let have = std::fs::read(&sibling).ok();
            if have.as_ref() == want {
                continue;
            }
            if bless {
                match want {
                    Some(bytes) => std::fs::write(&sibling, bytes).unwrap(),
                    None => std::fs::remove_file(&sibling).unwrap(),
                }
            } else {
                differ.push(sibling.display().to_string());
            }
        }
    }
    assert!(
        differ.is_empty(),
        "siblings that pack would make otherwise (PEREGRINE_BLESS=1 rewrites them): {differ:?}"
    );
}
