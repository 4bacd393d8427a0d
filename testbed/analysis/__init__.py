"""What a run's results mean, read from its folder (pure: files in, figures out): the
fidelity guard's verdict (:mod:`.fidelity`), deadlock and watchdog figures (:mod:`.deadlock`),
the headline figures (:mod:`.headline`, :mod:`.headline_links`, :mod:`.headline_series`) and
the figures of each phenomenon (:mod:`.phenomena`).

May import: config, machine, topology, budget, results.
"""
