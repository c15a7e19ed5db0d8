"""profile.py DIR N NAME...: µs per request by object, by group and by symbol (the N largest) from
DIR/{1,2}-NAME.data (perf record -e cpu-clock, sample periods in ns) and DIR/{1,2}-NAME.req."""
import collections, re, subprocess, sys

tmp, top, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
GROUPS = [  # by symbol, first match wins; what is left is "other kernel" or "user"
    ("switch: finish_task_switch, __schedule", r"finish_task_switch|__schedule$|^\[k\] schedule$|switch_mm|__switch_to|pick_next|psi_"),
    ("wake-up: try_to_wake_up, irqrestore", r"try_to_wake_up|_raw_spin_unlock_irqrestore|ttwu|enqueue_|select_task_rq|update_curr|dequeue_"),
    ("epoll", r"ep_|epoll"),
]


def load(data, key, req):
    out = subprocess.run(["perf", "report", "-i", data, "--no-children", "--sort", key, "-q", "--stdio",
                          "-g", "none", "-F", "period," + key], capture_output=True, text=True).stdout
    d = collections.Counter()
    for line in out.splitlines():
        m = re.match(r"\s*(\d+)\s+(.*)", line)
        if m:
            d[m.group(2).strip()] += int(m.group(1)) / 1e3 / req
    return d


req = {(n, r): int(open(f"{tmp}/{r}-{n}.req").read()) for n in names for r in (1, 2)}
print("requests in each run: " + ", ".join(f"{n} {req[(n, 1)]}/{req[(n, 2)]}" for n in names))
for key in ("dso", "sym"):
    tabs = {(n, r): load(f"{tmp}/{r}-{n}.data", key, req[(n, r)]) for n in names for r in (1, 2)}
    print(f"\nus per request by {key} (round 1/round 2)".ljust(52) + " ".join(f"{n:>13s}" for n in names))
    print(f"{'all':51s} " + " ".join(f"{sum(tabs[(n, 1)].values()):6.2f}/{sum(tabs[(n, 2)].values()):<6.2f}" for n in names))
    if key == "sym":
        def group(k):
            if not k.startswith("[k]"):
                return "user"
            for label, pat in GROUPS:
                if re.search(pat, k):
                    return label
            return "other kernel (TCP/IP, system calls, copies)"
        for label in [g[0] for g in GROUPS] + ["other kernel (TCP/IP, system calls, copies)", "user"]:
            print(f"  {label:49s} " + " ".join(
                f"{sum(v for k, v in tabs[(n, 1)].items() if group(k) == label):6.2f}/"
                f"{sum(v for k, v in tabs[(n, 2)].items() if group(k) == label):<6.2f}" for n in names))
    allk = collections.Counter()
    for t in tabs.values():
        allk.update(t)
    for k, _ in allk.most_common(top if key == "sym" else 6):
        print(f"{k[:51]:51s} " + " ".join(f"{tabs[(n, 1)][k]:6.3f}/{tabs[(n, 2)][k]:<6.3f}" for n in names))
