"""A conformance run's results as JUnit XML (one ``testcase`` per expected result, so CI shows
each) and as Markdown, and its one line per expected result for the console. Pure: the
runner writes the strings to the files :mod:`testbed.results.files` names.

JUnit: one ``testsuite`` per plan; ``classname`` is ``<plan>.<case>``, ``name`` the expected
result; a failed result has a ``failure`` whose message is the measured figure against the
bound; a case that does not apply is one ``skipped`` test case with its reason. Every test
case carries the measured figure and the bound as ``property`` elements.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass

from testbed.conformance.plans import PLANS

PASS, FAIL, NA = "pass", "fail", "n/a"


@dataclass(frozen=True)
class ResultRow:
    """One expected result of one case (or a case's not-applicable line, ``check`` empty)."""

    plan: str
    case: str
    title: str
    check: str
    status: str  # PASS, FAIL or NA
    measured: str
    bound: str
    run_dir: str = ""

    @property
    def key(self) -> str:
        return f"{self.plan}.{self.case}"


def exit_status(rows: list[ResultRow]) -> int:
    """0 only when every applicable result passed (and there was one): N/A never passes a plan
    by itself, and a selection of only N/A cases is not a success."""
    applicable = [r for r in rows if r.status != NA]
    return 0 if applicable and all(r.status == PASS for r in applicable) else 1


def line(r: ResultRow) -> str:
    """The console's line for one result."""
    if r.status == NA:
        return f"N/A  {r.key} {r.title}: {r.measured}"
    return f"{r.status.upper():4} {r.key} {r.check}: {r.measured} (bound {r.bound})"


def junit_xml(rows: list[ResultRow]) -> str:
    """The JUnit XML document of every row."""
    root = ET.Element("testsuites", name="conformance")
    for plan in PLANS:
        mine = [r for r in rows if r.plan == plan]
        if not mine:
            continue
        suite = ET.SubElement(root, "testsuite", name=plan, tests=str(len(mine)),
                              failures=str(sum(r.status == FAIL for r in mine)),
                              skipped=str(sum(r.status == NA for r in mine)), errors="0")
        for r in mine:
            tc = ET.SubElement(suite, "testcase", classname=r.key,
                               name=r.check or r.title)
            props = ET.SubElement(tc, "properties")
            for k, v in (("measured", r.measured), ("bound", r.bound), ("run_dir", r.run_dir)):
                ET.SubElement(props, "property", name=k, value=v)
            if r.status == FAIL:
                ET.SubElement(tc, "failure", message=f"{r.measured} (bound {r.bound})")
            elif r.status == NA:
                ET.SubElement(tc, "skipped", message=f"not applicable: {r.measured}")
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(rows: list[ResultRow], scaling: dict[str, str], fabric: str) -> str:
    """The Markdown report: a table of every result, then each case's scaling."""
    passed = sum(r.status == PASS for r in rows)
    failed = sum(r.status == FAIL for r in rows)
    na = sum(r.status == NA for r in rows)
    out = ["# Conformance", "",
           f"Fabric: {fabric}. {passed} passed, {failed} failed, {na} cases not applicable.", "",
           "| case | expected result | status | measured | bound |", "|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r.key} {_cell(r.title)} | {_cell(r.check or '-')} | {r.status} | "
                   f"{_cell(r.measured)} | {_cell(r.bound or '-')} |")
    out += ["", "## Scaling", ""]
    out += [f"- **{key}**: {_cell(text)}" for key, text in scaling.items()]
    return "\n".join(out) + "\n"
