"""What the `testbed` commands print: one console (stderr, so that a command's own output on
stdout stays clean), literal text, the fidelity verdict, and a finished run's results."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.text import Text

console = Console(stderr=True, soft_wrap=True)


def say(*parts: str | tuple[str, str]) -> None:
    """Print user-facing text literally: plain strings, or (text, style) pairs for colour.

    Rich would read square brackets in a message as markup and drop them: a name's pattern
    ``^[a-z][a-z0-9-]{0,23}$`` printed as ``^{0,23}$``. Text.assemble never parses markup."""
    console.print(Text.assemble(*parts), highlight=False)


def print_fidelity(section: dict | None) -> None:
    """The fidelity guard's verdict after the results (testbed.analysis.fidelity): red when a run
    was not a faithful emulation, with every reason."""
    from testbed.analysis.fidelity import lines

    style = "green" if section and section["ok"] else "bold red"
    for line in lines(section):
        console.print(line, style=style, markup=False, highlight=False)


def print_agents(section: dict | None) -> None:
    """What the switch agents ran at, when it was not what was asked (testbed.fabric.agents)."""
    if section and section.get("refused"):
        console.print(f"note: {section['refused']}", style="yellow", markup=False,
                      highlight=False)


def print_run(run_dir: Path, s: dict) -> None:
    """A finished run: where its results are, its flows, headline figures, watchdog events, any
    deadlock, and the fidelity verdict last, where the eye lands."""
    say(("done", "green"), f": results in {run_dir}")
    for pcap in s.get("captures", []):
        say(f"  capture: {run_dir / pcap}")
    for name, f in s.get("flows", {}).items():
        say(f"  flow {name}: {f['src']} -> {f['dst']}, {f['bytes_received']} bytes")
    from testbed.report.png import background_lines, deadlock_lines

    for line in background_lines(s.get("background")):
        say(f"  {line}")
    if s.get("headline"):
        from testbed.report.headline_text import headline_tables

        for table in headline_tables(s["headline"]):
            console.print(table)
    for e in s.get("watchdog_events", []):
        say(f"  watchdog: {e['switch']} port {e['port']} class {e['tc']}: "
            f"{e['event']} {e.get('detail', '')}")
    for line in deadlock_lines(s.get("deadlock")):
        console.print(f"  {line[2:]}", markup=False)
    print_agents(s.get("agents"))
    print_fidelity(s.get("fidelity"))
