"""Running things on a fabric: a fabric's parts brought up in order and down in reverse
(:mod:`.bringup`), a run's folder, clock and end (:mod:`.lifecycle`), scenarios
(:mod:`.scenario`, with :mod:`.scenario_fields` and :mod:`.scenario_background`) and running
one with its faults (:mod:`.scenario_run`), the samplers and captures of a run
(:mod:`.counter_sampler`, :mod:`.cpuload`, :mod:`.capture`), sweeps (:mod:`.sweep`,
:mod:`.sweep_run`) and ``testbed calibrate`` (:mod:`.calibrate`).

May import every package but labs and cli: it calls the analysis and the report as a run ends.
"""
