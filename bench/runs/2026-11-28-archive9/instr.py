import sys, re, subprocess, collections
# usage: instr.py CGFILE BIN FUNCNAME_SUBSTR [N]
f, binp, fn = sys.argv[1], sys.argv[2], sys.argv[3]
N = int(sys.argv[4]) if len(sys.argv) > 4 else 10000
cost = collections.Counter()
pos = None
skip = False
addr = 0; line = 0
def parse_pos(tok, prev):
    if tok == '*': return prev
    if tok[0] in '+-': return prev + int(tok, 0) if not tok[1:].startswith('0x') else prev + (int(tok[1:],16) if tok[0]=='+' else -int(tok[1:],16))
    return int(tok, 0)
for raw in open(f):
    raw = raw.rstrip('\n')
    if not raw: continue
    c = raw[0]
    if raw.startswith('calls='):
        skip = True; continue
    if c.isdigit() or c in '+-*':
        toks = raw.split()
        a = parse_pos(toks[0], addr); l = parse_pos(toks[1], line)
        addr, line = a, l
        if skip:
            skip = False; continue
        if len(toks) > 2:
            cost[a] += int(toks[2])
        continue
    skip = False
# symbol range
out = subprocess.run(['nm', '-C', '--size-sort', '-S', binp], capture_output=True, text=True).stdout
for l in out.splitlines():
    p = l.split(None, 3)
    if len(p) == 4 and fn in p[3]:
        start, size = int(p[0], 16), int(p[1], 16)
        break
dis = subprocess.run(['objdump', '-d', '--no-show-raw-insn', '-C', f'--start-address={start}', f'--stop-address={start+size}', binp], capture_output=True, text=True).stdout
tot = 0
for l in dis.splitlines():
    m = re.match(r'\s*([0-9a-f]+):\s*(.*)', l)
    if not m: continue
    a = int(m.group(1), 16)
    c = cost.get(a, 0); tot += c
    if c: print(f'{c/N:6.2f} {a:x} {m.group(2)}')
print('total', tot / N, file=sys.stderr)
