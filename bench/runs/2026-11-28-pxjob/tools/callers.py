#!/usr/bin/env python3
"""Callers of functions matching PAT with call counts and inclusive cost. usage: callers.py FILE N PAT"""
import sys, re, collections
path, n, pat = sys.argv[1], float(sys.argv[2]), sys.argv[3]
fnames = {}
def nm(s):
    m = re.match(r'\((\d+)\)(?: (.*))?', s)
    if m:
        if m.group(2) is not None: fnames[m.group(1)] = m.group(2)
        return fnames.get(m.group(1), s)
    return s
edges = collections.Counter(); counts = collections.Counter()
fn = cfn = None; calls = None; positions = 1
for line in open(path, errors='replace'):
    line = line.rstrip('\n')
    if line.startswith('positions:'): positions = len(line.split()) - 1; continue
    if line.startswith('fn='): fn = nm(line[3:]); continue
    if line.startswith('cfn='): cfn = nm(line[4:]); continue
    if line.startswith('calls='): calls = int(line.split()[0][6:]); continue
    if calls is not None and line and (line[0].isdigit() or line[0] in '+-*'):
        parts = line.split()
        if cfn and pat in cfn:
            edges[(fn, cfn)] += int(parts[positions]); counts[(fn, cfn)] += calls
        calls = None
for (f, c), v in edges.most_common(30):
    print(f"{v/n:8.1f} {counts[(f,c)]/n:6.2f}x  {f[:70]} -> {c[:60]}")
