"""preempt-sites.py REQ < perf script output of sched:sched_switch -g: each switch of the
traced task by (prev_state, next task, kernel path, innermost user frame), per request."""
import collections, sys

req = float(sys.argv[1])
c = collections.Counter()
for block in sys.stdin.read().split("\n\n"):
    lines = [l.strip() for l in block.strip().splitlines()]
    if not lines or "prev_state=" not in lines[0]:
        continue
    state = lines[0].split("prev_state=")[1].split()[0]
    nxt = lines[0].split("next_comm=")[1].split(" next_pid")[0]
    syms = [l.split(None, 1)[1].split("+")[0] for l in lines[1:] if len(l.split(None, 1)) > 1]
    if "exit_to_user_mode_loop" in syms:
        path = "at a system call's exit"
    elif "do_epoll_wait" in syms:
        path = "asleep in epoll_wait"
    elif any("irqentry" in s or "sysvec" in s for s in syms):
        path = "interrupt"
    else:
        path = syms[2] if len(syms) > 2 else "?"
    user = [s for s in syms if not s.startswith(("__schedule", "schedule", "exit_to", "do_syscall", "entry_SYS",
                                                 "asm_", "irqentry", "sysvec", "__x64", "do_epoll", "0 ["))]
    c[(state, nxt, path, user[0][:60] if user else "-")] += 1
for k, v in c.most_common(8):
    print(f"  {v / req:6.3f}/req  {v:6d}  {k[0]:2s} -> {k[1]:16s} {k[2]:24s} {k[3]}")
print(f"  {sum(c.values()) / req:6.3f}/req in all")
