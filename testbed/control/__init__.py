"""The control plane: what each switch's P4 tables hold, as P4Runtime entities built
from config and topology (:mod:`.entries`, pure), and pushing them to the switches
(:mod:`.p4runtime`).

May import: config, machine, topology.
"""
