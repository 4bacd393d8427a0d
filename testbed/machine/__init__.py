"""What the testbed does to this machine's kernel and files, below any fabric: network
namespaces (:mod:`.netns`), the kernel egress port with its class gates (:mod:`.ports`,
:mod:`.qdisc_netlink`, :mod:`.tcstats`), folders root may safely use (:mod:`.safepath`), the
record of what a run created and its cleanup (:mod:`.state`, :mod:`.state_check`), and files
handed to the user who ran sudo (:mod:`.owner`).

May import: config.
"""
