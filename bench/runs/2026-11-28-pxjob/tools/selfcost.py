#!/usr/bin/env python3
"""Self cost per function (all inlined files of a function summed) from a callgrind out file.
usage: selfcost.py FILE [N_REQUESTS] [TOP]"""
import sys, re, collections
path = sys.argv[1]; n = float(sys.argv[2]) if len(sys.argv) > 2 else 1; top = int(sys.argv[3]) if len(sys.argv) > 3 else 60
names = {}; selfc = collections.Counter(); incl_calls = collections.Counter()
# per (fn, file-of-inlined) too
byfile = collections.Counter()
fn = None; fi = None; after_calls = False
def nm(s, table):
    m = re.match(r'\((\d+)\)(?: (.*))?', s)
    if m:
        if m.group(2) is not None: table[m.group(1)] = m.group(2)
        return table.get(m.group(1), s)
    return s
fnames = {}; files = {}
positions = None
for line in open(path, errors='replace'):
    line = line.rstrip('\n')
    if line.startswith('positions:'):
        positions = line.split()[1:]
        continue
    if line.startswith('fn='):
        fn = nm(line[3:], fnames); fi = None; after_calls = False; continue
    if line.startswith(('fl=', 'fi=', 'fe=')):
        f = nm(line[3:], files)
        if line.startswith(('fi=', 'fe=')): fi = f
        else: fi = None; curfl = f
        continue
    if line.startswith('cfn='):
        nm(line[4:], fnames); continue
    if line.startswith(('cfl=', 'cfi=')):
        nm(line[4:], files); continue
    if line.startswith('calls='):
        after_calls = True; continue
    if not line or not (line[0].isdigit() or line[0] in '+-*0x'):
        continue
    parts = line.split()
    np = len(positions) if positions else 1
    if len(parts) <= np: continue
    try: cost = int(parts[np])
    except ValueError: continue
    if after_calls:
        after_calls = False
        continue
    selfc[fn] += cost
    byfile[(fn, fi)] += cost
tot = sum(selfc.values())
print(f"total {tot/n:,.0f}")
for f, c in selfc.most_common(top):
    print(f"{c/n:10,.1f}  {f}")
if len(sys.argv) > 4:
    pat = sys.argv[4]
    print('--- by inlined file for', pat)
    for (f, fi), c in byfile.most_common():
        if pat in f and c/n >= 1: print(f"{c/n:10,.1f}  {f[:60]}  <- {fi}")
