"""Instructions one BMv2 executes per forwarded packet, counted by valgrind's callgrind.

Packets per second on a shared 2-core machine move by a third from run to run (the other
benchmarks take medians of interleaved runs for that reason); an instruction count does not
move with the machine's load. So this benchmark measures the price of our P4 program exactly:
for each BMv2 build, the full program beside the same program built without the lossless
control (``-DPLAIN_FORWARDING``), and, for the default build, BMv2's own default log level
(trace) beside the level the fabric runs it at without a log (off).

One measurement runs the switch under callgrind twice, forwarding ``--small`` and then
``--large`` RoCE packets (512 bytes, class 3, one at a time: the switch never drops one), and
takes the difference of the two runs' totals over the difference of the packets forwarded,
so that start-up, programming and teardown cancel out. Everything the process executes counts:
its receive, pipeline and transmit threads, and the libraries they call (libc's malloc, GMP).

Run as root (needs valgrind and p4c): sudo .venv/bin/python -m benchmarks.bmv2_instructions
Writes bmv2_instructions.json and .md to benchmarks/out. A measurement takes about a minute.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from benchmarks.lossless import FRAME, program_dut

#: The size of each packet sent (bytes on the wire, before the FCS).
PACKET_BYTES = 512

#: One RoCE packet at a time into port 1, each forwarded to port 2 before the next goes.
SEND = FRAME + r"""
got = 0
for _ in range(n):
    s.send(f)
    r.settimeout(10.0)  # under valgrind a packet takes milliseconds
    try:
        while True:
            _p, a = r.recvfrom(65536)
            if a[2] != 4:  # not our own outgoing frame
                got += 1
                break
    except socket.timeout:
        pass
print(got)
"""

#: A wrapper in BMv2's place: the same command line under callgrind, at the log level asked.
WRAPPER = """#!/bin/bash
a=("$@")
for i in "${!a[@]}"; do
  if [ "${a[$i]}" = --log-level ]; then a[$((i + 1))]=LEVEL; fi
done
exec valgrind --tool=callgrind --callgrind-out-file=OUT BINARY "${a[@]}"
"""


@dataclass
class Measurement:
    build: str
    program: str  # "full" or "plain"
    log_level: str
    packets: tuple[int, int]  # forwarded in the small and the large run
    instructions: tuple[int, int]  # callgrind's totals of the two runs
    per_packet: int


def per_packet(packets: tuple[int, int], instructions: tuple[int, int]) -> int:
    """Instructions per forwarded packet: the large run's extra over its extra packets. Pure."""
    extra = packets[1] - packets[0]
    if extra <= 0:
        raise ValueError(f"the large run forwarded no more packets than the small ({packets})")
    return round((instructions[1] - instructions[0]) / extra)


def callgrind_total(path: Path) -> int:
    """The instructions a callgrind output file counts (its summary or totals line). Pure."""
    for line in path.read_text().splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    raise ValueError(f"{path}: no callgrind summary")


def _run(build: str, plain: bool, level: str, n: int) -> tuple[int, int]:
    """Forward n packets through one switch under callgrind: (forwarded, instructions)."""
    from testbed.config import bmv2_build
    from tests.dataplane import bmv2_harness

    with tempfile.TemporaryDirectory(prefix="roce-callgrind-") as d:
        tmp = Path(d)
        out = tmp / "callgrind.out"
        wrapper = tmp / "simple_switch_grpc"
        real = bmv2_build.select(build, log=False).binary  # type: ignore[arg-type]
        wrapper.write_text(WRAPPER.replace("LEVEL", level).replace("OUT", str(out))
                           .replace("BINARY", real))
        wrapper.chmod(0o755)
        with bmv2_harness(2, build=build, binary=str(wrapper),  # type: ignore[arg-type]
                          ready_timeout=300) as h:
            program_dut(h, plain, tmp)
            r = subprocess.run(["ip", "netns", "exec", h.ns, sys.executable, "-c", SEND, str(n),
                                str(PACKET_BYTES)], capture_output=True, text=True,
                               timeout=1800, check=True)
        # the harness has stopped the switch: callgrind wrote its file on the way out
        return int(r.stdout.split()[0]), callgrind_total(out)


def measure(build: str, program: str, level: str, small: int, large: int) -> Measurement:
    runs = [_run(build, program == "plain", level, n) for n in (small, large)]
    packets = (runs[0][0], runs[1][0])
    instructions = (runs[0][1], runs[1][1])
    return Measurement(build, program, level, packets, instructions,
                       per_packet(packets, instructions))


def _count(v: int | None) -> str:
    return f"{v:,}" if v else "-"


def markdown(ms: list[Measurement]) -> str:
    """The table: instructions per packet, full and plain, and their ratio, per build and log
    level. Pure."""
    rows = {}
    for m in ms:
        rows.setdefault((m.build, m.log_level), {})[m.program] = m.per_packet
    lines = ["| build | BMv2 log level | full program | plain forwarding | plain / full |",
             "|---|---|---|---|---|"]
    for (build, level), r in rows.items():
        full, plain = r.get("full"), r.get("plain")
        ratio = f"{plain / full:.3f}" if full and plain else "-"
        lines.append(f"| {build} | {level} | {_count(full)} | {_count(plain)} | {ratio} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path("benchmarks/out"))
    ap.add_argument("--builds", default="default,fast")
    ap.add_argument("--small", type=int, default=100, help="packets in the first run")
    ap.add_argument("--large", type=int, default=400, help="packets in the second run")
    args = ap.parse_args()
    if shutil.which("valgrind") is None:
        sys.exit("needs valgrind: sudo apt-get install valgrind")
    from testbed.config.bmv2_build import installed

    found = installed()
    cases = []
    for build in args.builds.split(","):
        if build not in found:
            sys.exit(f"BMv2's {build} build is not installed (testbed doctor lists the builds)")
        # the fast build has its logging compiled out: its level changes nothing
        for level in (("off", "trace") if build == "default" else ("off",)):
            cases += [(build, "full", level), (build, "plain", level)]
    ms = []
    for build, program, level in cases:
        m = measure(build, program, level, args.small, args.large)
        print(json.dumps(asdict(m)), flush=True)
        ms.append(m)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "bmv2_instructions.json").write_text(
        json.dumps([asdict(m) for m in ms], indent=2) + "\n")
    (args.out / "bmv2_instructions.md").write_text(markdown(ms))
    print(markdown(ms))


if __name__ == "__main__":
    main()
