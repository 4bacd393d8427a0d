"""The fabric resolved as pure data, from a config: the leaf-spine graph with its ports,
addresses and routes (:mod:`.graph`), every queue's QoS numbers derived from config, link rate
and MTU (:mod:`.qos`), and loading a config with every check that needs the resolved fabric
(:mod:`.validate`). Nothing here starts a process.

May import: config, machine (a port's :class:`~testbed.machine.ports.PortSpec`).
"""
