"""The `testbed` command (:mod:`.commands`) and what only it uses: its output
(:mod:`.output`, :mod:`.progress`), the bodies of its longer commands (:mod:`.budget`,
:mod:`.experiments`), the Mininet CLI (:mod:`.mncli`), and the machine's setup commands
(:mod:`.doctor`, :mod:`.image`, :mod:`.provision`). :mod:`.quick_exit` leaves without the
interpreter's teardown.

The top layer: it may import every package; none imports it.
"""


def main() -> None:
    """The `testbed` command: the console script's entry point (pyproject.toml's
    ``testbed.cli:main``, as before the commands moved into :mod:`.commands`, so that a script
    installed then still runs). It imports the commands only when called, so importing one
    module of this package does not import them all."""
    from testbed.cli.commands import main as commands_main

    commands_main()
