import sys,re,collections
# lines.py PROFILE(dump-instr) [N]: per function: Ir/req, I1mr/req, distinct 64B code lines executed each request, instrs, span
f=sys.argv[1]; n=10000
events=None; fn=None; cur=0
perfn=collections.defaultdict(lambda: collections.defaultdict(lambda:[0]*12))
names={}
incall=False
for line in open(f):
    if line.startswith('events:'): events=line.split()[1:]; continue
    m=re.match(r'^(c?fn)=\((\d+)\)(?: (.*))?',line)
    if m:
        if m.group(3): names[m.group(2)]=m.group(3).strip()
        if m.group(1)=='fn': fn=names[m.group(2)]
        continue
    if line.startswith('calls='): incall=True; continue
    m=re.match(r'^(0x[0-9a-f]+|\+\d+|-\d+|\*)\s+(?:\S+)\s*(.*)$',line)
    if m and fn:
        a=m.group(1)
        if a.startswith('0x'): cur=int(a,16)
        elif a.startswith('+'): cur+=int(a[1:])
        elif a.startswith('-'): cur-=int(a[1:])
        if incall: incall=False; continue
        vals=[int(x) for x in m.group(2).split()]
        v=perfn[fn][cur]
        for i,x in enumerate(vals): v[i]+=x
ii=events.index('Ir'); im=events.index('I1mr')
res=[]; alllines=set()
for fn,d in perfn.items():
    ir=sum(v[ii] for v in d.values())
    if ir<n/2: continue
    hot=[a for a,v in d.items() if v[ii]>=n*0.9]
    lines=set(a//64 for a in hot); alllines|=lines
    mr=sum(v[im] for v in d.values())
    span=(max(hot)-min(hot)) if hot else 0
    res.append((ir/n,mr/n,len(lines),len(hot),span,fn[:70]))
res.sort(key=lambda r:-r[0])
print("Ir/req I1mr/req lines instrs span fn")
for r in res[:25]: print("%7.1f %6.1f %5d %6d %7d %s"%r)
print("distinct hot lines total", len(alllines))
if len(sys.argv)>2:
    target=sys.argv[2]
    for fn,d in perfn.items():
        if target not in fn: continue
        hot=sorted(a for a,v in d.items() if v[ii]>=n*0.9)
        runs=[]; start=prev=hot[0]
        for a in hot[1:]:
            if a-prev>16: runs.append((start,prev)); start=a
            prev=a
        runs.append((start,prev))
        print(fn, "runs", len(runs))
        gaps=[runs[i+1][0]-runs[i][1] for i in range(len(runs)-1)]
        print("gap bytes total", sum(gaps), "gaps >256:", sum(1 for g in gaps if g>256), "bytes in big gaps", sum(g for g in gaps if g>256))
        base=hot[0]
        for (s,e) in runs: print(hex(s), e-s+1, end='; ')
        print()
