"""Mode ib-credit's input FIFOs on a real veth (testbed.machine.inputs): each forwarded frame
goes to the FIFO of the input port its source MAC names, the kernel counts each input's bytes,
and the port serves its inputs round robin, a frame a turn, as an IB switch's output does."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from testbed.config.constants import OTHER_INPUT
from testbed.machine.inputs import input_majors, input_sent
from testbed.machine.netns import inside
from testbed.machine.tcstats import QdiscReader
from tests.portrig import port
from tests.test_ports import RECEIVER

pytestmark = pytest.mark.root
FRAME = 4200

#: Sends frames of DSCP 26 (class 3) from the given input ports (0: a source MAC no switch
#: port writes), each numbered input * 1000 + its sequence, where test_ports' RECEIVER reads
#: a frame's number.
SENDER = r"""
import json, socket, struct, sys
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind(("pa", 0))
for i, (inp, n) in enumerate(json.loads(sys.argv[1])):
    for k in range(n):
        ip = struct.pack("!BBHHHBBH4s4s", 0x45, 26 << 2, 4186, 0, 0, 64, 17, 0, bytes(4), bytes(4))
        src = bytes([2, 0x4c, inp, 0, 0, 1])
        f = b"\x02" * 6 + src + b"\x08\x00" + ip + struct.pack("!I", inp * 1000 + k)
        s.send(f + bytes(4200 - len(f)))
"""



def run_in(ns: str, script: str, *args: str, background: bool = False):
    cmd = ["ip", "netns", "exec", ns, sys.executable, "-c", script, *args]
    if background:
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    return subprocess.run(cmd, check=True, capture_output=True, text=True)


def test_each_input_has_its_own_fifo_and_the_port_serves_them_in_turn() -> None:
    with port(10.0, credited=(3,), inputs=(1, 2, 5)) as (ns, gates):
        gates.close(3)
        gates.plug(3)  # the closing gate's burst used up: everything after is held
        run_in(ns, SENDER, json.dumps([[1, 4], [2, 4], [5, 2], [0, 1]]))
        with inside(f"/run/netns/{ns}"):
            reader = QdiscReader()
        majors = input_majors((3,), (1, 2, 5, OTHER_INPUT))
        held = input_sent(reader.dump(majors))
        rx = run_in(ns, RECEIVER, "2", background=True)
        time.sleep(1.0)  # the receiver is listening
        gates.open(3)
        order = [seq // 1000 for _dscp, _t, seq in json.loads(rx.communicate(timeout=30)[0])]
        done = input_sent(reader.dump(majors))
        reader.close()
    # held: the closed gate took the first frame to look at, and its input counts it gone
    assert {k: v[1] for k, v in held.items() if k[0] != OTHER_INPUT} == {
        (1, 3): 3 * FRAME, (2, 3): 4 * FRAME, (5, 3): 2 * FRAME}, held
    assert sum(v[1] for k, v in held.items() if k[0] == OTHER_INPUT) == FRAME, held
    assert sorted(order) == [0] + [1] * 4 + [2] * 4 + [5] * 2
    # the frame the gate held to look at leaves first; then a frame of each input in turn
    assert order[0] == 1 and set(order[1:5]) == {0, 1, 2, 5} and set(order[5:8]) == {1, 2, 5} \
        and order[8:] == [1, 2, 2], order
    assert {k: v for k, v in done.items() if k[0] != OTHER_INPUT} == {
        (1, 3): (4 * FRAME, 0), (2, 3): (4 * FRAME, 0), (5, 3): (2 * FRAME, 0)}
