#!/usr/bin/env bash
# Builds the Debian package: target/debian/peregrine_VERSION-1_ARCH.deb.
# As ripgrep's ci/build-deb: the release binary first, then what it
# generates of itself (man pages, shell completions) where the package's
# assets expect them, then cargo-deb without building again.
#   cargo install --locked cargo-deb   # once
#   dist/debian/build-deb.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
target=${CARGO_TARGET_DIR:-target}
cargo build --release --locked -p peregrine-cli
generated="$target/release/generated"
rm -rf "$generated"
mkdir -p "$generated/man" "$generated/completions"
bin="$target/release/peregrine"
"$bin" man --out-dir "$generated/man"
gzip -9n "$generated"/man/*.1
"$bin" completions bash >"$generated/completions/peregrine"
"$bin" completions zsh >"$generated/completions/_peregrine"
"$bin" completions fish >"$generated/completions/peregrine.fish"
# Stripped, as Debian's packages are: 45 MB with the release profile's line
# tables, which backtraces of a panicking handler would use.
cargo deb --locked --no-build --strip -p peregrine-cli "$@"
