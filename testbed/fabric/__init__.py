"""The running fabric's parts, each one job: a BMv2 process (:mod:`.bmv2`), the Mininet
network of switches and hosts (:mod:`.network`), the switch agents' processes
(:mod:`.agents`), the hosts' RoCE endpoints (:mod:`.endpoints`), the best-effort background
flows' processes (:mod:`.background`), and reading the fabric's
counters (:mod:`.measure`). :mod:`testbed.run.bringup` composes them.

May import: config, machine, topology, budget, results, control, agent.
"""
