"""A run's results drawn for people: report.png (:mod:`.png`), report.html
(:mod:`.html`, :mod:`.figures`, ``templates/``), the plain data both draw (:mod:`.data`), the
headline figures in words and tables (:mod:`.headline_text`), and the pictures and tables of a
sweep and of a comparison (:mod:`.experiment_plots`, :mod:`.compare`).

May import: config, machine, topology, budget, results, analysis.
"""
