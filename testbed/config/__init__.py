"""What a fabric is meant to be, as typed data: the config models (:mod:`.models`, the
``agent`` section in :mod:`.agent`, ``fidelity`` in :mod:`.fidelity`, their shared base in
:mod:`.base`), the facts every part shares (:mod:`.constants`: the P4 program's numbers and
the kernel port's qdisc handles; the wire's are :mod:`traffic.wire`'s), which switch queues
keep a P4 phantom and which the agents resync (:mod:`.phantoms`), and which BMv2 build a
switch runs (:mod:`.bmv2_build`).

Layer 1, the lowest: it imports no other testbed package (only :mod:`traffic`'s wire facts and
names). Everything above reads it.
"""
