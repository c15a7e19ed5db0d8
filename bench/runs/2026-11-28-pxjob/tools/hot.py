#!/usr/bin/env python3
"""Per-instruction self cost in functions matching PAT (needs --dump-instr=yes). usage: hot.py FILE N PAT [MIN]"""
import sys, re, collections
path, n, pat = sys.argv[1], float(sys.argv[2]), sys.argv[3]
mn = float(sys.argv[4]) if len(sys.argv) > 4 else 0.5
fnames = {}
def nm(s):
    m = re.match(r'\((\d+)\)(?: (.*))?', s)
    if m:
        if m.group(2) is not None: fnames[m.group(1)] = m.group(2)
        return fnames.get(m.group(1), s)
    return s
c = collections.Counter(); fn = None; after = False; positions = ['line']; last = {}
for line in open(path, errors='replace'):
    line = line.rstrip('\n')
    if line.startswith('positions:'): positions = line.split()[1:]; continue
    if line.startswith('fn='): fn = nm(line[3:]); continue
    if line.startswith('cfn='): nm(line[4:]); continue
    if line.startswith('calls='): after = True; continue
    if not line or not (line[0].isdigit() or line[0] in '+-*'): continue
    parts = line.split()
    if len(parts) <= len(positions): continue
    vals = []
    for i, p in enumerate(parts[:len(positions)]):
        key = positions[i]
        if p == '*': v = last.get(key, 0)
        elif p[0] in '+-': v = last.get(key, 0) + int(p, 0)
        else: v = int(p, 0)
        last[key] = v; vals.append(v)
    if after: after = False; continue
    if fn and pat in fn: c[vals[0]] += int(parts[len(positions)])
for a in sorted(c):
    if c[a] / n >= mn: print(f"{a:x} {c[a]/n:.1f}")
