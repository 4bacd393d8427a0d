"""``python -m testbed.cli``: the `testbed` command, as the tests and benchmarks run it."""

from testbed.cli.commands import main

main()
