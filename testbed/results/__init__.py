"""The results folder's format, one definition shared by its writers (switch agents,
samplers, the run) and its readers (analysis, report, labs): every file's name
(:mod:`.files`), the telemetry files' columns, records, writers and readers
(:mod:`.telemetry`), the RoCE endpoints' files (:mod:`.endpoints`), and a run's
``summary.json`` typed, with its reader (:mod:`.summary`).

May import: config, machine.
"""
