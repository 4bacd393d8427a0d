"""`testbed lab list | show N | start N [DIR] | check N [RESULTS]`: the classroom labs."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markdown import Markdown
from rich.text import Text

from testbed.labs.catalog import Lab, LabError, all_labs, find_lab
from testbed.machine.owner import make_results_dir, sudo_owner
from testbed.machine.safepath import UnsafePath

lab_app = typer.Typer(no_args_is_help=True, help="Classroom labs: a sheet, a setting to change, "
                      "an experiment, and a grade.")
out = Console(soft_wrap=True)


def _fail(msg: str) -> None:
    Console(stderr=True).print(Text.assemble(("error:", "red"), " ", msg))
    raise typer.Exit(2)


def _lab(number: int) -> Lab:
    try:
        return find_lab(number)
    except LabError as exc:
        _fail(str(exc))
        raise  # unreachable


def default_folder(number: int) -> Path:
    return Path(f"lab-{number:02d}")


@lab_app.command("list")
def list_labs() -> None:
    """The labs, in order of difficulty."""
    try:
        labs = all_labs()
    except LabError as exc:
        _fail(str(exc))
        return
    for lab in labs:
        out.print(Text.assemble((f"{lab.number:>2}  ", "bold"), (lab.spec.title, "bold"),
                                f": {lab.spec.summary}"))


@lab_app.command("show")
def show(number: int) -> None:
    """Print lab N's sheet."""
    Console().print(Markdown(_lab(number).sheet.read_text()))  # wrapped to the terminal


def copy_starter(lab: Lab, folder: Path, owner: tuple[int, int] | None = None) -> list[Path]:
    """Copy the lab's starter files into ``folder`` (kept when already there: a second `start`
    never overwrites a student's work); ``owner``: (uid, gid) to give them to."""
    make_results_dir(folder)
    made = []
    for name in lab.spec.files:
        dest = folder / name
        if not dest.exists():
            shutil.copyfile(lab.starter(name), dest)
            made.append(dest)
    if owner is not None:
        for p in [folder, *made]:
            os.chown(p, *owner)
    return made


@lab_app.command("start")
def start(number: int,
          folder: Annotated[Path | None, typer.Argument(help="Working folder (default "
                                                        "./lab-NN).")] = None) -> None:
    """Copy lab N's starter files into a working folder that the student owns."""
    lab = _lab(number)
    folder = folder or default_folder(number)
    try:
        made = copy_starter(lab, folder, sudo_owner())
    except OSError as exc:
        _fail(f"cannot make {folder}: {exc.strerror}")
        return
    except UnsafePath as exc:
        _fail(str(exc))
        return
    kept = [n for n in lab.spec.files if folder / n not in made]
    out.print(f"lab {lab.number}: {lab.spec.title} -> {folder}/")
    for p in made:
        out.print(f"  new   {p}")
    for n in kept:
        out.print(f"  kept  {folder / n} (already there)")
    out.print(f"Read the sheet: testbed lab show {number}; grade your runs: "
              f"testbed lab check {number}")


def _folder_for(number: int, folder: Path | None) -> Path:
    if folder is not None:
        return folder
    d = default_folder(number)
    return d if d.is_dir() else Path(".")


@lab_app.command("check")
def check(number: int,
          results: Annotated[Path | None, typer.Argument(help="A results folder, or a folder "
                                                         "of them (default: DIR/results).")] = None,
          folder: Annotated[Path | None, typer.Option("--dir", help="The lab's working folder "
                                                      "(default ./lab-NN, else .).")] = None
          ) -> None:
    """Grade the student's own runs and files: one line per question; exit 1 if any fails."""
    from testbed.labs.checks import grade

    lab = _lab(number)
    folder = _folder_for(number, folder)
    results = results or folder / "results"
    lines = grade(lab, folder, results)
    for line in lines:
        v = line.verdict
        mark = ("pass", "green") if v.ok else ("FAIL", "bold red")
        out.print(Text.assemble(mark, f"  {line.spec.id}: {line.spec.question} ", ("-> ", "dim"),
                                v.reason))
        if not v.ok and v.hint:
            out.print(Text.assemble(("        hint: ", "yellow"), v.hint))
        if v.warning:
            out.print(Text.assemble(("        warning: ", "yellow"), v.warning))
    bad = sum(not ln.verdict.ok for ln in lines)
    out.print(f"{len(lines) - bad} of {len(lines)} passed")
    if bad:
        raise typer.Exit(1)
