import sys,re,subprocess
# fnmiss.py PROFILE N_REQUESTS [TOP]: self Ir, I1mr, D1mr, D1mw, DLmr per request by function
# (callgrind_annotate of a --cache-sim=yes profile, summed over source files), by misses
f=sys.argv[1]; n=int(sys.argv[2]); top=int(sys.argv[3]) if len(sys.argv)>3 else 15
out=subprocess.run(['callgrind_annotate','--threshold=100','--inclusive=no','--show=Ir,I1mr,D1mr,D1mw,DLmr','--sort=D1mr','--auto=no',f],capture_output=True,text=True).stdout
rows=[];agg={}
for line in out.splitlines():
    m=re.match(r'^\s*((?:[0-9,]+|\.)(?: \([^)]*\))?\s+){5}(\S.*)$',line)
    if not m: continue
    nums=re.findall(r'([0-9,]+|\.)(?: \([^)]*\))?\s+',line[:m.start(2)])
    v=[0 if x=='.' else int(x.replace(',','')) for x in nums[:5]]
    name=m.group(2)
    if 'PROGRAM TOTALS' in name: rows.insert(0,('TOTAL',v)); continue
    fn=name.split(':',1)[1] if ':' in name else name
    fn=re.sub(r' \[.*\]$','',fn)
    a=agg.setdefault(fn,[0]*5)
    for i in range(5): a[i]+=v[i]
tot=rows[0][1] if rows else None
print(f"{'function':60s} {'Ir':>7s} {'I1mr':>6s} {'D1mr':>6s} {'D1mw':>6s} {'DLmr':>6s}")
if tot: print(f"{'TOTAL':60s} "+" ".join(f"{x/n:7.1f}" if i==0 else f"{x/n:6.2f}" for i,x in enumerate(tot)))
for fn,v in sorted(agg.items(),key=lambda kv:-(kv[1][2]+kv[1][3]))[:top]:
    if fn.startswith('std::sys::backtrace') or 'start_thread' in fn or fn.startswith('clone') or 'Thread>::new' in fn or 'FnOnce' in fn or 'lifecycle' in fn: continue
    print(f"{fn[:60]:60s} "+" ".join(f"{x/n:7.1f}" if i==0 else f"{x/n:6.2f}" for i,x in enumerate(v)))
