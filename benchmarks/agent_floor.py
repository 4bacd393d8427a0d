"""What the switch agents' CPU is made of under the 4:1 incast on 2x4x2, and how low a loop in
Python, or in C, could take it at the same number of wake-ups.

#12 asks for the agents at 10% of a core or less under this incast. An agent sleeps in epoll
and wakes for each PFC frame its switch receives or sends, each tick, resync and sample, and
each pause that expires. So its CPU is its wake-ups times what each costs: the bare wake-up
(the kernel's and the loop's own) plus the work the wake-up then does. This benchmark measures
both in one run, to tell the two apart: each agent's wake-ups a second (its voluntary context
switches) and CPU while the incast runs, then, under the same incast, a bare loop that does
nothing but wake in epoll for a datagram and read it, at the busiest agent's rate and
scheduling, once as Python (the agents' own ``select.epoll`` and ``recv``) and once compiled
from C (when a C compiler is installed). The agents' wake-ups a second times a bare wake-up's
CPU is the floor of an agent in that language, whatever else it did better.

Run as root: sudo .venv/bin/python -m benchmarks.agent_floor [--runs 3]
Writes agent_floor.json and agent_floor.md to benchmarks/out.
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: The goal #12 sets the agents under this incast, as a fraction of a core.
GOAL_CORES = 0.10

#: The bare loop, in Python: argv fd, seconds. It wakes in epoll for the datagrams on ``fd``,
#: reads each, and prints how many it read, and its CPU time and wake-ups inside the loop.
PY_LOOP = r"""
import resource, select, socket, sys, time
s = socket.socket(fileno=int(sys.argv[1])); s.setblocking(False)
ep = select.epoll(); ep.register(s.fileno(), select.EPOLLIN)
r0 = resource.getrusage(resource.RUSAGE_SELF); end = time.monotonic() + float(sys.argv[2]); n = 0
while time.monotonic() < end:
    for _fd, _ev in ep.poll(0.05):
        while True:
            try:
                s.recv(2048)
            except BlockingIOError:
                break
            n += 1
r1 = resource.getrusage(resource.RUSAGE_SELF)
print(n, r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime, r1.ru_nvcsw - r0.ru_nvcsw)
"""

#: The same loop in C.
C_LOOP = r"""
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);
                          return t.tv_sec + t.tv_nsec / 1e9; }
static double cpu(struct rusage *r) { return r->ru_utime.tv_sec + r->ru_utime.tv_usec / 1e6
                                           + r->ru_stime.tv_sec + r->ru_stime.tv_usec / 1e6; }
int main(int argc, char **argv) {
    int fd = atoi(argv[1]); double end = now() + atof(argv[2]); long n = 0; char buf[2048];
    int ep = epoll_create1(0); struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
    struct rusage r0, r1; struct epoll_event out[8];
    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev); getrusage(RUSAGE_SELF, &r0);
    while (now() < end) {
        int k = epoll_wait(ep, out, 8, 50);
        for (int i = 0; i < k; i++)
            while (recv(fd, buf, sizeof buf, MSG_DONTWAIT) > 0) n++;
    }
    getrusage(RUSAGE_SELF, &r1);
    printf("%ld %f %ld\n", n, cpu(&r1) - cpu(&r0), r1.ru_nvcsw - r0.ru_nvcsw);
    return 0;
}
"""


def build_c_loop(tmp: Path) -> list[str] | None:
    """The C loop's command, compiled into ``tmp``; None without a C compiler."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    (tmp / "loop.c").write_text(C_LOOP)
    subprocess.run([cc, "-O2", "-o", str(tmp / "loop"), str(tmp / "loop.c")], check=True)
    return [str(tmp / "loop")]


def bare_wakeup_us(loop: list[str], rate: float, seconds: float, rt_priority: int) -> dict:
    """One bare loop fed ``rate`` datagrams a second for ``seconds``, run at SCHED_FIFO
    ``rt_priority`` as the agents are (0: as this process): its CPU per wake-up."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    chrt = ["chrt", "-f", str(rt_priority)] if rt_priority and shutil.which("chrt") else []
    with ours, theirs:
        proc = subprocess.Popen([*chrt, *loop, str(theirs.fileno()), str(seconds)],
                                pass_fds=[theirs.fileno()], stdout=subprocess.PIPE, text=True)
        time.sleep(0.3)  # the loop is up (a Python one has started its interpreter)
        start, k, msg = time.monotonic(), 0, bytes(64)
        while (t := time.monotonic() - start) < seconds - 0.5:
            ours.send(msg)
            k += 1
            time.sleep(max(0.0, k / rate - t))
        out, _ = proc.communicate(timeout=seconds + 10)
    n, cpu_s, wakeups = out.split()
    return {"sent": k, "read": int(n), "wakeups": int(wakeups), "cpu_s": float(cpu_s),
            "us_per_wakeup": round(float(cpu_s) / max(1, int(wakeups)) * 1e6, 1)}


def agents_over(procs, seconds: float) -> list[dict]:
    """Each agent's wake-ups a second and CPU (of a core) over ``seconds``."""
    def snap() -> list[tuple[int, float, float]]:
        out = []
        for p in procs:
            t = p.cpu_times()
            out.append((p.num_ctx_switches().voluntary, t.user, t.system))
        return out

    a = snap()
    time.sleep(seconds)
    b = snap()
    return [{"switch": Path(p.cmdline()[-1]).name.split(".")[0],
             "wakeups_per_s": round((b1[0] - a1[0]) / seconds, 1),
             "user_cores": round((b1[1] - a1[1]) / seconds, 4),
             "system_cores": round((b1[2] - a1[2]) / seconds, 4)}
            for p, a1, b1 in zip(procs, a, b, strict=True)]


def one_run(seconds: float, loops: dict[str, list[str]], rt_priority: int) -> dict:
    """A fresh fabric under the incast: the agents over ``seconds``, then each bare loop."""
    from benchmarks.lossless import agent_processes, fabric_2x4x2, start_incast

    with fabric_2x4x2() as (fabric, _tmp):
        procs = agent_processes(fabric)
        start_incast(fabric, 2 + seconds * (1 + len(loops)) + 2)
        time.sleep(1.5)
        agents = agents_over(procs, seconds)
        rate = max(a["wakeups_per_s"] for a in agents)
        bare = {kind: bare_wakeup_us(cmd, rate, seconds, rt_priority)
                for kind, cmd in loops.items()}
    return {"agents": agents, "bare": bare, "bare_rate_per_s": rate}


def totals(run: dict) -> dict:
    """A run's sums, and the floors: its wake-ups a second times a bare wake-up's CPU."""
    wakeups = sum(a["wakeups_per_s"] for a in run["agents"])
    cores = sum(a["user_cores"] + a["system_cores"] for a in run["agents"])
    out = {"wakeups_per_s": wakeups, "cores": cores,
           "us_per_wakeup": cores / wakeups * 1e6 if wakeups else None}
    for kind, b in run["bare"].items():
        out[f"{kind}_floor_cores"] = wakeups * b["us_per_wakeup"] / 1e6
    return out


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"


def markdown(runs: list[dict]) -> str:
    kinds = list(dict.fromkeys(k for r in runs for k in r["bare"]))
    head = ("| run | agents' wake-ups a second | agents' CPU (of a core) | CPU a wake-up (us) | "
            + " | ".join(f"bare {k} wake-up (us) | {k} floor" for k in kinds) + " |")
    lines = ["The switch agents under the 4:1 incast on 2x4x2 (10 Mbit/s, agents at the default "
             "scheduling), then, under the same incast, a bare epoll loop woken by a datagram "
             "at the busiest agent's rate, at the agents' scheduling. The floor is the agents' "
             "wake-ups a second times the bare loop's CPU a wake-up.", "",
             head, "|" + "---|" * (4 + 2 * len(kinds))]
    for i, r in enumerate(runs, 1):
        t = totals(r)
        cells = [str(i), f"{t['wakeups_per_s']:.0f}", _pct(t["cores"]),
                 "-" if t["us_per_wakeup"] is None else f"{t['us_per_wakeup']:.0f}"]
        for k in kinds:
            b = r["bare"].get(k)
            cells += ["-", "-"] if b is None else [f"{b['us_per_wakeup']:.0f}",
                                                   _pct(t[f"{k}_floor_cores"])]
        lines.append("| " + " | ".join(cells) + " |")
    first = runs[0]
    lines += ["", "Each agent in run 1:", "",
              "| switch | wake-ups a second | user | system |", "|---|---|---|---|"]
    lines += [f"| {a['switch']} | {a['wakeups_per_s']:.0f} | {_pct(a['user_cores'])} | "
              f"{_pct(a['system_cores'])} |" for a in first["agents"]]
    med = {k: statistics.median(totals(r)[f"{k}_floor_cores"] for r in runs if k in r["bare"])
           for k in kinds}
    lines += ["", f"Goal: {GOAL_CORES:.0%} of a core. At these wake-ups, "
              + "; ".join(f"an agent in {k} that did nothing but wake would take "
                          f"{_pct(v)} of a core (median)" for k, v in med.items()) + "."]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/out"))
    ap.add_argument("--name", default="agent_floor")
    ap.add_argument("--redraw", action="store_true", help="redraw the table of a saved run")
    args = ap.parse_args()
    if args.redraw:
        saved = json.loads((args.out / f"{args.name}.json").read_text())
        (args.out / f"{args.name}.md").write_text(markdown(saved))
        return
    from testbed.config.models import FabricConfig
    from testbed.machine.state import fabric_lock

    rt = FabricConfig().agent.realtime_priority
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        loops = {"Python": [sys.executable, "-c", PY_LOOP]}
        c_loop = build_c_loop(Path(tmp))
        if c_loop is not None:
            loops["C"] = c_loop
        for _ in range(args.runs):
            with fabric_lock():
                runs.append(one_run(args.seconds, loops, rt))
            print(json.dumps(runs[-1]), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps(runs, indent=2))
    (args.out / f"{args.name}.md").write_text(markdown(runs))
    print(markdown(runs))


if __name__ == "__main__":
    main()
