#!/usr/bin/env python3
"""Summary of a cargo --timings HTML: the slowest units and the critical path."""
import json, re, sys
html = open(sys.argv[1]).read()
m = re.search(r'const UNIT_DATA = (\[.*?\n\]);', html, re.S)
units = json.loads(m.group(1))
by_i = {u["i"]: u for u in units}
for u in units:
    u["end"] = u["start"] + u["duration"]
def label(u):
    return f'{u["name"]} {u["version"]}{u["target"]}'
total = sum(u["duration"] for u in units)
end = max(u["end"] for u in units)
print(f"units: {len(units)}, sum of unit durations {total:.1f} s, last unit ends at {end:.1f} s")
print("\n15 slowest units (s):")
for u in sorted(units, key=lambda u: -u["duration"])[:15]:
    print(f'  {u["duration"]:7.1f}  {label(u)}')
# Who unblocked whom: a unit starts once its last blocker is done.
blockers = {}
for u in units:
    for j in u.get("unblocked_units", []) + u.get("unblocked_rmeta_units", []):
        blockers.setdefault(j, []).append(u)
path = []
cur = max(units, key=lambda u: u["end"])
while cur is not None:
    path.append(cur)
    bs = blockers.get(cur["i"], [])
    cur = max(bs, key=lambda b: b["end"]) if bs else None
print("\ncritical path (start -> end, duration s):")
for u in reversed(path):
    print(f'  {u["start"]:7.1f} -> {u["end"]:7.1f}  {u["duration"]:6.1f}  {label(u)}')
