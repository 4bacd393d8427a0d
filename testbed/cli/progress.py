"""The live line `testbed run` shows while a scenario's flows run: seconds elapsed and left, and
how many flows have started and finished. Faults print as lines above it as they fire (the
run's ``progress`` callback); on a console that is not a terminal (a CI log, a pipe) the line
is not drawn at all, so logs hold only those lines."""

from __future__ import annotations

from collections.abc import Callable

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn

from testbed.run.scenario_run import RunStatus


class RunProgress:
    """A context manager; pass its ``callback`` to run_scenario as ``status``."""

    def __init__(self, console: Console) -> None:
        self._shown = console.is_terminal
        self._bar = Progress(TextColumn("  {task.description}"), BarColumn(),
                             TextColumn("{task.fields[flows]}"), console=console,
                             transient=True, disable=not self._shown)
        self._task: TaskID | None = None

    @property
    def callback(self) -> Callable[[RunStatus], None] | None:
        """``status`` when the line is drawn; None otherwise, so that a run outside a terminal
        does not ask its endpoints for a status nobody sees."""
        return self.status if self._shown else None

    def __enter__(self) -> RunProgress:
        self._bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._bar.stop()

    def status(self, st: RunStatus) -> None:
        text = status_text(st)
        if self._task is None:
            self._task = self._bar.add_task(text[0], total=st.duration_s, flows=text[1])
        self._bar.update(self._task, total=st.duration_s, completed=min(st.t_s, st.duration_s),
                         description=text[0], flows=text[1])


def status_text(st: RunStatus) -> tuple[str, str]:
    """(time, flows) as the line shows them, e.g. ('3.0 s of 6 s, 3.0 s left',
    'flows: 3 of 3 started, 1 done')."""
    left = max(0.0, st.duration_s - st.t_s)
    return (f"{st.t_s:.1f} s of {st.duration_s:g} s, {left:.1f} s left",
            f"flows: {st.flows_started} of {st.flows_total} started, {st.flows_done} done")
