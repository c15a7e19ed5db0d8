import sys, re, collections
def calls(f):
    names = {}; cnt = collections.Counter(); cur = None
    for line in open(f, errors="replace"):
        m = re.match(r"c?fn=\((\d+)\)(?: (.*))?", line)
        if m:
            i, n = m.group(1), m.group(2)
            if n: names[i] = n.strip()
            if line.startswith("cfn="): cur = names.get(i)
            continue
        m = re.match(r"calls=(\d+)", line)
        if m and cur: cnt[cur] += int(m.group(1))
    return cnt
f, n = sys.argv[1], float(sys.argv[2])
c = calls(f)
for k in ("malloc", "calloc", "realloc", "free", "cfree", "__libc_malloc", "__libc_free"):
    if k in c: print(f"{k}: {c[k]/n:.1f} calls per connection")
if len(sys.argv) > 4:
    a, na = calls(sys.argv[3]), float(sys.argv[4])
