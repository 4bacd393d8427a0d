"""Classroom labs: lab sheets in ``labs/``, and the commands that start and grade them
(``testbed lab list | show | start | check``): the catalog (:mod:`.catalog`), a run read as
evidence (:mod:`.evidence`, :mod:`.flows`, :mod:`.cycles`), the checks (:mod:`.checks` and
its ``checks_*``) and their verdicts (:mod:`.verdict`), and the ``lab`` commands
(:mod:`.cli`).

May import every package but cli: a lab reads a run's results through the same readers and
figures as the report, and loads its scenarios as ``testbed run`` does.
"""
