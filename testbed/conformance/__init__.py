"""Conformance: SONiC's RoCEv2, PFC and PFC-watchdog test plans (sonic-mgmt, docs/testplan/)
run against the emulated fabric, the hosts standing in for the tester and the fabric for the
device under test (issue #34).

Owns the plans' registry (:mod:`.plans`: each case a scenario built in code, its scaling to this
testbed and its expected results, or the reason it does not apply), the expected-result checks
(:mod:`.checks`, pure functions over a run's summary), the JUnit XML and Markdown writers
(:mod:`.report`) and running a selection of cases into one results folder (:mod:`.runner`).

May import every package but labs and cli: it runs scenarios through :mod:`testbed.run`.
"""
