#!/usr/bin/env python3
"""Self cost by (inlined file, line) inside functions matching PAT. usage: lines.py FILE N PAT [MIN]"""
import sys, re, collections
path, n, pat = sys.argv[1], float(sys.argv[2]), sys.argv[3]
mn = float(sys.argv[4]) if len(sys.argv) > 4 else 0.5
fnames, files = {}, {}
def nm(s, table):
    m = re.match(r'\((\d+)\)(?: (.*))?', s)
    if m:
        if m.group(2) is not None: table[m.group(1)] = m.group(2)
        return table.get(m.group(1), s)
    return s
c = collections.Counter(); fn = fi = fl = None; after = False; positions = ['line']
last = {}
for line in open(path, errors='replace'):
    line = line.rstrip('\n')
    if line.startswith('positions:'): positions = line.split()[1:]; continue
    if line.startswith('fn='): fn = nm(line[3:], fnames); fi = None; after = False; continue
    if line.startswith('fl='): fl = nm(line[3:], files); fi = None; continue
    if line.startswith(('fi=', 'fe=')): fi = nm(line[3:], files); continue
    if line.startswith('cfn='): nm(line[4:], fnames); continue
    if line.startswith(('cfl=', 'cfi=')): nm(line[4:], files); continue
    if line.startswith('calls='): after = True; continue
    if not line or not (line[0].isdigit() or line[0] in '+-*'): continue
    parts = line.split()
    if len(parts) <= len(positions): continue
    # positions may be relative (+n, -n, *)
    vals = []
    for i, p in enumerate(parts[:len(positions)]):
        key = positions[i]
        if p == '*': v = last.get(key, 0)
        elif p[0] in '+-': v = last.get(key, 0) + int(p, 0)
        else: v = int(p, 0)
        last[key] = v; vals.append(v)
    cost = int(parts[len(positions)])
    if after: after = False; continue
    if fn and pat in fn:
        f = (fi or fl or '?').split('/')[-2:]
        c[('/'.join(f), vals[-1])] += cost
tot = sum(c.values())
print(f"total self {tot/n:.1f}")
for (f, l), v in sorted(c.items(), key=lambda x: -x[1]):
    if v / n >= mn: print(f"{v/n:8.1f}  {f}:{l}")
