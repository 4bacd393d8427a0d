"""The labs in ``labs/``: each folder ``NN-name/`` holds a lab sheet (``README.md``), its
metadata (``lab.yaml``), the starter files a student edits, ``solution/`` and ``broken/`` (a
wrong solution with the typical mistake), ``instructor.md`` and ``figures/``.

``lab.yaml``::

    title: Incast and PFC
    goals: [..]
    files: [incast-pfc.yaml]          # starter files `testbed lab start` copies
    checks:                           # one line of `testbed lab check` each
      - id: paused
        question: Did PFC pause the senders?
        check: pfc_paused             # a function of testbed.labs.checks
        run: lab04-pfc                # the scenario `name:` whose newest run it grades
        args: {}                      # the function's own arguments
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from traffic.names import FILE_PATTERN, NAME_PATTERN

#: Sections every lab sheet has, in this order (the issue's list).
SHEET_SECTIONS = ("Goals", "Background", "Steps", "Questions", "What you should see")


def labs_root() -> Path:
    """``labs/`` beside the ``testbed`` package (the repository, or the VM's shared folder);
    ``ROCE_TESTBED_LABS`` points elsewhere."""
    env = os.environ.get("ROCE_TESTBED_LABS")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "labs"


class CheckSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str = Field(pattern=r"^[a-z0-9-]{1,30}$")
    question: str
    check: str
    run: str | None = Field(None, pattern=NAME_PATTERN)
    args: dict = Field(default_factory=dict)


class LabSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    title: str
    summary: str
    goals: list[str] = Field(min_length=1)
    files: list[Annotated[str, Field(pattern=FILE_PATTERN)]] = Field(min_length=1)
    checks: list[CheckSpec] = Field(min_length=1)


class Lab:
    """One lab folder and its metadata."""

    def __init__(self, path: Path, spec: LabSpec) -> None:
        self.path, self.spec = path, spec
        self.number = int(path.name.split("-", 1)[0])

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def sheet(self) -> Path:
        return self.path / "README.md"

    def starter(self, name: str) -> Path:
        return self.path / name

    def solution(self, name: str) -> Path:
        return self.path / "solution" / name

    def broken(self, name: str) -> Path:
        return self.path / "broken" / name


class LabError(Exception):
    """A lab that does not exist or whose folder is not well formed: one line for the user."""


def load_lab(path: Path) -> Lab:
    meta = path / "lab.yaml"
    try:
        data = yaml.safe_load(meta.read_text())
        return Lab(path, LabSpec.model_validate(data))
    except OSError as exc:
        raise LabError(f"{meta}: cannot read it ({exc.strerror})") from None
    except (yaml.YAMLError, ValidationError) as exc:
        first = str(exc).splitlines()
        raise LabError(f"{meta}: not a valid lab.yaml: {' '.join(first[:3])}") from None


def all_labs(root: Path | None = None) -> list[Lab]:
    """Every lab, in order of its number (the order of difficulty)."""
    root = root or labs_root()
    if not root.is_dir():
        raise LabError(f"no labs folder at {root} (set ROCE_TESTBED_LABS to the repository's "
                       "labs/)")
    return sorted((load_lab(p) for p in root.iterdir()
                   if p.is_dir() and p.name[:2].isdigit()), key=lambda lab: lab.number)


def find_lab(number: int, root: Path | None = None) -> Lab:
    labs = all_labs(root)
    for lab in labs:
        if lab.number == number:
            return lab
    raise LabError(f"there is no lab {number}; the labs are "
                   f"{', '.join(str(lab.number) for lab in labs)} (`testbed lab list`)")
