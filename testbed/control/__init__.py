"""The control plane: what each switch's P4 tables hold, as P4Runtime entities built
from config and topology (:mod:`.entries`, pure), how a switch moves to new routes without a
moment with no route (:mod:`.reroute`, pure), and pushing them to the switches
(:mod:`.p4runtime`).

May import: config, machine, topology.
"""
