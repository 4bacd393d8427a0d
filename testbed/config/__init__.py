"""What a fabric is meant to be, as typed data: the config models (:mod:`.models`, the
``agent`` section in :mod:`.agent`, their shared base in :mod:`.base`), the facts every part
shares (:mod:`.constants`: the P4 program's numbers, traffic classes, DSCPs), and which BMv2
build a switch runs (:mod:`.bmv2_build`).

Layer 1, the lowest: it imports no other testbed package (only :mod:`traffic`'s wire facts and
names). Everything above reads it.
"""
