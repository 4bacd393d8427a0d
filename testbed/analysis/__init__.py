"""What a run's results mean, read from its folder (pure: files in, figures out): the
fidelity guard's verdict (:mod:`.fidelity`), deadlock and watchdog figures (:mod:`.deadlock`),
the headline figures (:mod:`.headline`, :mod:`.headline_links`, :mod:`.headline_series`), a
collective's figures as nccl-tests defines them (:mod:`.collectives`), the tester's counters
beside the switches' (:mod:`.tester`), the figures of each phenomenon (:mod:`.phenomena`), and
the one quantile they all use (:mod:`.quantiles`).

May import: config, machine, topology, budget, results.
"""
