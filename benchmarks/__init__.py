"""Measurements run on demand, each a module run from the repository's root:
``sudo .venv/bin/python -m benchmarks.capacity`` (docs/PERFORMANCE.md gives every command and
its committed output in benchmarks/out/). A package, so that the benchmarks import one another
and the tests' rigs (``tests.dataplane``, ``tests.hostpair``) as modules, and the tests import
their pure parts (``from benchmarks import capacity``), with no edit of ``sys.path``."""
