import sys,subprocess
bin=sys.argv[1]; runs_s=sys.stdin.read().strip().rstrip(';')
runs=[(int(a,16),int(b)) for a,b in (x.split() for x in runs_s.split('; ') if x.strip())]
addrs=[]
for i in range(len(runs)-1):
    s=runs[i][0]+runs[i][1]; e=runs[i+1][0]
    if e-s>24: addrs.append((i,s+(e-s)//2,e-s))
out=subprocess.run(['addr2line','-a','-e',bin,'-i']+[hex(a) for _,a,_ in addrs],capture_output=True,text=True).stdout
gi={a:(i,g) for i,a,g in addrs}
cur=[];res=[]
def flush():
    if cur: res.append(cur[:])
for line in out.splitlines():
    if line.startswith('0x'):
        flush(); cur.clear(); cur.append(int(line,16))
    else: cur.append('/'.join(line.split('/')[-2:]))
flush()
for r in res:
    a=r[0]; i,g=gi[a]
    fr=[x for x in r[1:] if not x.startswith(('src/option','src/result','slice/','ptr/','iter/','num/','mem/','intrinsics','src/cmp','str/','vec/','alloc/','src/alloc','raw_vec','src/boxed','src/cell'))]
    print(f"gap{i:3d} {g:5d}B  run_before={runs[i][1]:4d}B : "+" < ".join(fr[:4]))
