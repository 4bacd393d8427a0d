"""The pure rules behind "safe as root" (docs/THREAT_MODEL.md): what a state record may name
for `testbed clean` to act on it, which folders and files root accepts, and the one name
pattern every name from a YAML file must match. Hostile names reach each field that reaches a
command or a path, and each is refused with one line that names the field. No root needed:
the attacks themselves, as another user, are in tests/test_safe_root.py."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from testbed.config.models import ConfigError
from testbed.labs.catalog import LabSpec
from testbed.machine.safepath import UnsafePath, folder_problem, read_own, secure_dir, write_new
from testbed.machine.state_check import (
    ProcFacts,
    RunFacts,
    file_problem,
    interface_problem,
    process_problem,
)
from testbed.run.scenario import parse_scenario
from traffic.names import NAME_PATTERN, is_name, name_problem

#: Names that would end a shell word, climb out of a folder or split a line.
HOSTILE = ["a'b", 'a"b', "a;b", "..", "a/b", "../etc", "a\nb", "a b", "$(id)", "`id`", ""]

RUN = RunFacts(uid=0, started=1000.0, node_netns=frozenset({11, 12}), root_netns=1)


def test_the_name_pattern_refuses_every_hostile_name_and_takes_the_shipped_ones() -> None:
    assert not any(is_name(n) for n in HOSTILE)
    assert all(is_name(n) for n in ("h1", "leaf12", "spine2", "lab04-lossless", "h3-h1"))
    assert name_problem("flows.0.name", "a;b") == (
        "flows.0.name: 'a;b' is not a name: use a lowercase letter, then up to 23 lowercase "
        "letters, digits and dashes")
    assert NAME_PATTERN == "^[a-z][a-z0-9-]{0,23}$"  # the fabric name's, as README shows it


def _scenario(**fields: object) -> dict:
    base = {"name": "safe", "fabric": {"spines": 1, "leaves": 2, "hosts_per_leaf": 1},
            "duration_s": 2,
            "flows": [{"name": "a", "src": "h1", "dst": "h2", "duration_s": 1}]}
    return {**base, **fields}


def _flow(**fields: object) -> list[dict]:
    return [{"name": "a", "src": "h1", "dst": "h2", "duration_s": 1, **fields}]


#: Each field of a scenario (and so of a fabric file) whose value reaches a command line or a
#: path: (the field as the error names it, the scenario with a hostile value there).
FIELDS = {
    "name": lambda bad: _scenario(name=bad),
    "flows.0.name": lambda bad: _scenario(flows=_flow(name=bad)),
    "flows.0.src": lambda bad: _scenario(flows=_flow(src=bad)),
    "flows.0.dst": lambda bad: _scenario(flows=_flow(dst=bad)),
    "faults.0.host": lambda bad: _scenario(faults=[{"at_s": 1, "host": bad,
                                                    "mode": "storm"}]),
    "faults.0.link_down": lambda bad: _scenario(faults=[{"at_s": 1,
                                                         "link_down": ["leaf1", bad]}]),
    "routes.0.switch": lambda bad: _scenario(routes=[{"switch": bad, "prefix": "10.0.2.1/32",
                                                      "via": "spine1"}]),
    "routes.0.via": lambda bad: _scenario(routes=[{"switch": "leaf1", "prefix": "10.0.2.1/32",
                                                   "via": bad}]),
    "capture.0": lambda bad: _scenario(capture=[bad]),
    "agent.pfc_watchdog.ports": lambda bad: _scenario(agent={"pfc_watchdog": {
        "ports": [f"{bad}:1"]}}),
}


@pytest.mark.parametrize("field", sorted(FIELDS))
@pytest.mark.parametrize("bad", HOSTILE, ids=repr)
def test_a_hostile_name_is_refused_with_one_line_naming_its_field(field: str, bad: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_scenario(FIELDS[field](bad), "hostile.yaml")
    problems = e.value.problems
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"{field}: ") or problems[0].startswith(f"{field}."), problems
    assert "\n" not in problems[0]


def test_the_untouched_scenario_is_taken() -> None:
    """The hostile cases above differ from it only in the one field."""
    assert parse_scenario(_scenario(), "fine.yaml").cfg.name == "safe"


@pytest.mark.parametrize("bad", ["../../etc/passwd", "a;b.yaml", "x.yaml\n", "/abs.yaml"])
def test_a_lab_hands_out_only_plain_yaml_files_and_names_its_runs(bad: str) -> None:
    spec = {"title": "t", "summary": "s", "goals": ["g"], "files": ["fine.yaml"],
            "checks": [{"id": "q", "question": "?", "check": "answer", "run": "lab-run"}]}
    assert LabSpec.model_validate(spec).files == ["fine.yaml"]
    with pytest.raises(ValueError, match="files"):
        LabSpec.model_validate({**spec, "files": [bad]})
    with pytest.raises(ValueError, match="run"):
        LabSpec.model_validate({**spec, "checks": [{**spec["checks"][0], "run": bad}]})


# -- what a state record may name --------------------------------------------------------------

def _proc(uid: int = 0, started: float = 1001.0, cmdline: str = "simple_switch_grpc x",
          netns: int | None = 1) -> ProcFacts:
    return ProcFacts(uid, started, cmdline, netns)


def test_a_recorded_process_is_the_runs_only_if_every_fact_agrees() -> None:
    assert process_problem(5, "simple_switch_grpc", None, _proc(), RUN) is None
    assert process_problem(5, "mininet:h1", 11, _proc(cmdline="bash mininet:h1", netns=11),
                           RUN) is None
    assert process_problem(5, "x", None, None, RUN) == "process 5: gone"
    assert "runs as uid 1001" in process_problem(5, "simple_switch_grpc", None,
                                                 _proc(uid=1001), RUN)
    assert "started before the run" in process_problem(5, "simple_switch_grpc", None,
                                                       _proc(started=900.0), RUN)
    assert "command line" in process_problem(5, "sleep", None, _proc(), RUN)
    assert "command line" in process_problem(5, "", None, _proc(), RUN)
    # a node's shell in another namespace than recorded; anything else outside the run's
    assert "namespace" in process_problem(5, "mininet:h1", 11,
                                          _proc(cmdline="bash mininet:h1", netns=12), RUN)
    assert "namespace" in process_problem(5, "simple_switch_grpc", None, _proc(netns=99), RUN)


def test_an_interface_is_the_runs_only_if_named_after_its_node_and_a_veth() -> None:
    kinds = {"leaf1-eth1": "veth", "leaf1-evil": "dummy", "eth0": "", "leaf1-tick": "veth"}
    nodes = {"leaf1", "h1"}
    assert interface_problem("leaf1-eth1", nodes, kinds) is None
    assert interface_problem("leaf1-tick", nodes, kinds) is None
    assert interface_problem("h1-eth0", nodes, kinds) is None  # gone with its namespace
    assert "not a veth" in interface_problem("leaf1-evil", nodes, kinds)
    assert "not named after a node" in interface_problem("eth0", nodes, kinds)
    assert "not named after a node" in interface_problem("spine1-eth1", nodes, kinds)


def test_a_file_is_the_runs_only_directly_inside_its_folder() -> None:
    run_dir = Path("/run/roce-testbed/fab")
    assert file_problem("/run/roce-testbed/fab/leaf1.grpc", run_dir) is None
    for bad in ("/etc/passwd", "/run/roce-testbed/fab/../fab.state.json",
                "/run/roce-testbed/fab/..", "/run/roce-testbed/fab/sub/x", "leaf1.grpc",
                "/run/roce-testbed/other/leaf1.grpc"):
        assert "not inside the run's folder" in file_problem(bad, run_dir), bad


# -- folders and files root accepts ------------------------------------------------------------

def _st(mode: int, uid: int | None = None) -> os.stat_result:
    return os.stat_result((mode, 0, 0, 1, os.geteuid() if uid is None else uid, 0, 0, 0, 0, 0))


def test_folder_rules() -> None:
    p = Path("/x")
    assert folder_problem(p, _st(stat.S_IFDIR | 0o700), private=True) is None
    assert "mode 0777" in folder_problem(p, _st(stat.S_IFDIR | 0o777), private=True)
    assert "mode 0755" in folder_problem(p, _st(stat.S_IFDIR | 0o755), private=True)
    assert "symbolic link" in folder_problem(p, _st(stat.S_IFLNK | 0o777), private=True)
    assert "not a folder" in folder_problem(p, _st(stat.S_IFREG | 0o600), private=True)
    assert "belongs to" in folder_problem(p, _st(stat.S_IFDIR | 0o700, uid=4242), private=True)
    # above it: root's or ours, written by no one else unless sticky (as /tmp)
    assert folder_problem(p, _st(stat.S_IFDIR | 0o755, uid=0), private=False) is None
    assert folder_problem(p, _st(stat.S_IFDIR | 0o1777, uid=0), private=False) is None
    assert "write in it" in folder_problem(p, _st(stat.S_IFDIR | 0o777, uid=0), private=False)


def test_a_secure_dir_is_made_0700_and_a_loose_one_refused(tmp_path: Path) -> None:
    made = secure_dir(tmp_path / "a" / "b", parents=True)
    assert stat.S_IMODE(made.stat().st_mode) == 0o700
    assert secure_dir(made) == made  # as it is: taken again
    made.chmod(0o777)
    with pytest.raises(UnsafePath, match="mode 0777"):
        secure_dir(made)
    (tmp_path / "link").symlink_to(made)
    with pytest.raises(UnsafePath, match="symbolic link"):
        secure_dir(tmp_path / "link")
    with pytest.raises(UnsafePath, match="symbolic link"):
        secure_dir(tmp_path / "link" / "below")


def test_a_file_is_written_afresh_and_read_only_when_ours(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.write_text("kept")
    link = tmp_path / "cfg.json"
    link.symlink_to(target)
    write_new(link, "{}")  # the link replaced, never written through
    assert target.read_text() == "kept" and not link.is_symlink()
    assert stat.S_IMODE(link.stat().st_mode) == 0o600
    assert read_own(link) == "{}"
    link.chmod(0o666)
    with pytest.raises(UnsafePath, match="lets other users write"):
        read_own(link)
    link.unlink()
    link.symlink_to(target)
    with pytest.raises(UnsafePath, match="cannot open"):
        read_own(link)  # O_NOFOLLOW


def test_the_cli_refuses_a_hostile_file_before_anything_runs(tmp_path: Path) -> None:
    """As a student would hand it round: `testbed run` says which field, no traceback."""
    import subprocess
    import sys

    import yaml

    bad = tmp_path / "hostile.yaml"
    bad.write_text(yaml.safe_dump(_scenario(flows=_flow(name="x; rm -rf ~"))))
    r = subprocess.run([sys.executable, "-m", "testbed.cli", "run", str(bad), "--results",
                        str(tmp_path / "results")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "flows.0.name: String should match pattern" in " ".join(r.stderr.split())
    assert not (tmp_path / "results").exists()


#: Calls that would run a string as code or as a shell command line.
_UNSAFE_CALLS = {"os.system", "os.popen", "yaml.load", "yaml.unsafe_load", "yaml.full_load",
                 "eval", "exec"}


def test_no_shell_strings_and_no_unsafe_loaders_in_the_code() -> None:
    """No ``shell=True``, ``os.system``, ``os.popen``, non-safe YAML loader, eval or exec in
    testbed/, traffic/ or benchmarks/ (read with ast; nothing is imported)."""
    import ast

    repo = Path(__file__).resolve().parent.parent
    found = []
    for pkg in ("testbed", "traffic", "benchmarks"):
        for path in sorted((repo / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, ast.Call):
                    continue
                name = ast.unparse(node.func)
                shell = any(k.arg == "shell" and not (isinstance(k.value, ast.Constant)
                                                      and k.value.value is False)
                            for k in node.keywords)
                if name in _UNSAFE_CALLS or shell:
                    found.append(f"{path.relative_to(repo)}:{node.lineno}: {name}")
    assert not found, found
