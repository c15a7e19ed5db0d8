#!/bin/bash
# The lead's browser-shaped rows (NOTES.md here): /tmp/arch13-site.prg is the bundled site packed by ed23b2e,
# /tmp/arch13/img.prg one 2,048-byte logo.png packed alone, /tmp/arch13/tree a folder with 17.txt (17 bytes);
# see bench/runs/2026-11-28-arch13/NOTES.md. Usage: browser-rows.sh BIN
cd /work/main
S=bench/runs/2026-11-28-arch13/cg-fields.sh
B=$1; o=/tmp/br-$(basename $B)
export AE="gzip, deflate, br, zstd"
echo "GET / AE: $($S $B $o-ae c50 serve /tmp/arch13-site.prg 2>&1 | tail -1)"
echo "GET / AE + INM br tag (304): $(INM='"167-6d8fa6c1d1344d3d"' $S $B $o-inm c50 serve /tmp/arch13-site.prg 2>&1 | tail -1)"
echo "GET / AE + stale INM (200): $(INM='"167-0000000000000000"' $S $B $o-stale c50 serve /tmp/arch13-site.prg 2>&1 | tail -1)"
echo "GET /logo.png AE: $(PATHX=logo.png $S $B $o-img c50 serve /tmp/arch13/img.prg 2>&1 | tail -1)"
echo "DIR GET /17.txt AE: $(PATHX=17.txt $S $B $o-dae c50 serve /tmp/arch13/tree 2>&1 | tail -1)"
echo "DIR GET /17.txt AE + INM (304): $(PATHX=17.txt INM='"11-5a55330c3c3b5ce7"' $S $B $o-dinm c50 serve /tmp/arch13/tree 2>&1 | tail -1)"
