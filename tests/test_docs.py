"""README and docs/ cite only files that exist, and benchmarks/out/ holds only outputs that the
docs cite and that the current benchmark scripts write: every figure in README.md and
docs/PERFORMANCE.md names the committed output it comes from, so an output nobody cites, or
one whose table its script would no longer write from its data, is stale. Pure."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "benchmarks" / "out"
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
#: The documents whose figures name their sources in benchmarks/out/.
CITING = [REPO / "README.md", REPO / "docs" / "PERFORMANCE.md"]

PATH = re.compile(r"(?<![\w/.-])((?:benchmarks/out|docs)/[\w./-]*)")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def cited_paths(doc: Path) -> set[str]:
    """The repository paths under benchmarks/out/ and docs/ that ``doc`` names."""
    return {m.rstrip(".,:;") for m in PATH.findall(doc.read_text())}


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: str(d.relative_to(REPO)))
def test_every_cited_path_exists(doc):
    missing = sorted(p for p in cited_paths(doc) if not (REPO / p).exists())
    assert not missing, f"{doc.name} cites files that do not exist: {missing}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda d: str(d.relative_to(REPO)))
def test_every_relative_link_resolves(doc):
    targets = [t for t in LINK.findall(doc.read_text()) if "://" not in t]
    missing = sorted(t for t in targets if not (doc.parent / t).exists())
    assert not missing, f"{doc.name} links to files that do not exist: {missing}"


def test_every_benchmark_output_is_cited():
    """A .md output is cited by its path; its .json, the data the table is drawn from, goes
    with it (docs/PERFORMANCE.md says so)."""
    cited = set().union(*(cited_paths(d) for d in CITING))
    uncited = []
    for f in sorted(OUT.iterdir()):
        rel = f"benchmarks/out/{f.name}"
        if rel in cited or (f.suffix == ".json" and rel[:-5] + ".md" in cited):
            continue
        uncited.append(f.name)
    assert not uncited, ("benchmarks/out/ holds outputs that neither README.md nor "
                         f"docs/PERFORMANCE.md cites (stale? delete them, or cite them): {uncited}")


def test_every_cited_output_has_its_data():
    cited = set().union(*(cited_paths(d) for d in CITING))
    for rel in sorted(p for p in cited if p.startswith("benchmarks/out/") and p.endswith(".md")):
        assert (REPO / rel[:-3]).with_suffix(".json").exists(), f"{rel} has no .json beside it"


def _outputs(prefix: str) -> list[Path]:
    return sorted(OUT.glob(f"{prefix}*.json"))


def _same(md: Path, text: str) -> None:
    assert md.read_text() == text, (f"{md.relative_to(REPO)} is not what its benchmark writes "
                                    "from the .json beside it today: run it again, or delete it")


@pytest.mark.parametrize("data", _outputs("capacity-"), ids=lambda p: p.stem)
def test_a_capacity_table_is_what_capacity_py_writes(data):
    from benchmarks.capacity import markdown

    saved = json.loads(data.read_text())
    _same(data.with_suffix(".md"), markdown(saved["results"], saved["costs"], saved["trials"]))


@pytest.mark.parametrize("data", _outputs("capacity_pairs-"), ids=lambda p: p.stem)
def test_a_pairs_table_is_what_capacity_pairs_py_writes(data):
    from benchmarks.capacity import FRAMES
    from benchmarks.capacity_pairs import markdown

    saved = json.loads(data.read_text())
    a = saved["settings"]
    setting = (f"{a['shape']}, {FRAMES[a['mtu']]}, {a['rate']:g} Mbit/s, {a['build']} build, "
               f"{a['pairs']} pairs")
    _same(data.with_suffix(".md"), markdown(saved["trials"], setting))


@pytest.mark.parametrize("data", _outputs("scenario_rates"), ids=lambda p: p.stem)
def test_a_scenario_rates_table_is_what_scenario_rates_py_writes(data):
    from benchmarks.scenario_rates import markdown

    _same(data.with_suffix(".md"), markdown(json.loads(data.read_text())))


@pytest.mark.parametrize("data", _outputs("agent_process"), ids=lambda p: p.stem)
def test_the_agent_process_table_is_what_agent_process_py_writes(data):
    from benchmarks.agent_ab import markdown
    from benchmarks.agent_process import VARIANTS

    _same(data.with_suffix(".md"), markdown(json.loads(data.read_text()), list(VARIANTS)))


@pytest.mark.parametrize("data", _outputs("agent_floor"), ids=lambda p: p.stem)
def test_the_agent_floor_table_is_what_agent_floor_py_writes(data):
    from benchmarks.agent_floor import markdown

    _same(data.with_suffix(".md"), markdown(json.loads(data.read_text())))


@pytest.mark.parametrize("data", _outputs("bmv2_instructions"), ids=lambda p: p.stem)
def test_the_instructions_table_is_what_bmv2_instructions_py_writes(data):
    from benchmarks.bmv2_instructions import Measurement, markdown

    ms = [Measurement(**m) for m in json.loads(data.read_text())]
    _same(data.with_suffix(".md"), markdown(ms))


@pytest.mark.parametrize("data", _outputs("all_host"), ids=lambda p: p.stem)
def test_an_all_host_table_is_what_all_host_py_writes(data):
    from benchmarks.all_host import markdown

    _same(data.with_suffix(".md"), markdown(json.loads(data.read_text())))


@pytest.mark.parametrize("data", _outputs("shipped"), ids=lambda p: p.stem)
def test_a_shipped_table_is_what_shipped_py_writes(data):
    from benchmarks.shipped import markdown

    _same(data.with_suffix(".md"), markdown(json.loads(data.read_text())))
