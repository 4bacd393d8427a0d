"""Provisioning through ansible-runner: summary, failures by name, and the lab files."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "testbed.cli"]


def tool(name: str) -> str | None:
    """A command of the environment running the tests: beside its Python first (a venv that is
    not activated), then on the PATH (the project installed anywhere else)."""
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    return shutil.which(name, path=path)


def need_ansible() -> str:
    playbook = tool("ansible-playbook")
    if playbook is None:
        pytest.skip("needs ansible-core (pip install -e '.[test]')")
    return playbook


def test_tools_are_found_beside_python_or_on_the_path(tmp_path: Path, monkeypatch) -> None:
    elsewhere, beside = tmp_path / "elsewhere", tmp_path / "venv" / "bin"
    for d in (elsewhere, beside):
        d.mkdir(parents=True)
        (d / "some-tool").write_text("#!/bin/sh\n")
        (d / "some-tool").chmod(0o755)
    monkeypatch.setenv("PATH", str(elsewhere))
    monkeypatch.setattr(sys, "executable", str(beside / "python"))
    assert tool("some-tool") == str(beside / "some-tool")
    (beside / "some-tool").unlink()
    assert tool("some-tool") == str(elsewhere / "some-tool")


@pytest.mark.root
def test_provision_check_prints_a_summary() -> None:
    need_ansible()
    r = subprocess.run([*CLI, "provision", "--check", "--skip-tags", "p4repo"],
                       capture_output=True, text=True, timeout=600, cwd=REPO)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "summary: ok=" in r.stderr and "failed=0" in r.stderr
    for task in ("Install base packages", "Install Mininet from the distribution",
                 "Create the virtual environment"):
        assert task in r.stderr


@pytest.mark.root
def test_a_failing_task_is_reported_by_name(tmp_path: Path) -> None:
    need_ansible()
    book = tmp_path / "fail.yml"
    book.write_text(
        "- name: A play that fails\n  hosts: all\n  gather_facts: false\n  tasks:\n"
        "    - name: Fine step\n      ansible.builtin.debug: {msg: hello}\n"
        "    - name: Install the impossible package\n"
        "      ansible.builtin.fail: {msg: 'no package named roce-nonexistent'}\n")
    r = subprocess.run([*CLI, "provision", "--playbook", str(book)], capture_output=True,
                       text=True, timeout=300, cwd=REPO)
    assert r.returncode == 1
    assert "FAILED: Install the impossible package: no package named roce-nonexistent" in \
        r.stderr, r.stderr
    assert "failed=1" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("option", ["--toolchain-archive", "--bmv2-fast-archive",
                                    "--bmv2-fast-source"])
def test_a_missing_archive_is_named_in_one_line(option: str) -> None:
    """The CLI checks the file (or source folder) before anything runs (and before asking for
    root)."""
    r = subprocess.run([*CLI, "provision", "--check", "--skip-tags", "p4repo", option,
                        "/nonexistent.tar.zst"], capture_output=True, text=True, timeout=120,
                       cwd=REPO)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.strip() == f"error: {option}: no such file /nonexistent.tar.zst", r.stderr


@pytest.mark.root
def test_an_archive_is_not_needed_where_the_toolchain_is_installed(tmp_path: Path) -> None:
    """The archive source is wired through to the p4 role: with the toolchain already on the
    PATH, --check with an archive installs nothing and never opens the archive."""
    need_ansible()
    for tool in ("simple_switch_grpc", "p4c-bm2-ss"):
        if shutil.which(tool) is None:
            pytest.skip(f"needs the P4 toolchain installed: {tool} is not on the PATH")
    archive = tmp_path / "p4toolchain-test.tar.zst"
    archive.write_bytes(b"not an archive: unpacking it would fail")
    r = subprocess.run([*CLI, "provision", "--check", "--tags", "p4", "--skip-tags", "p4repo",
                        "--toolchain-archive", str(archive)], capture_output=True, text=True,
                       timeout=600, cwd=REPO)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ok  Say that the P4 toolchain is already present" in r.stderr, r.stderr
    assert f"nothing to install; {archive} not needed" in r.stderr, r.stderr  # the role got it
    for task in ("Say what is missing", "Look at the archive", "Unpack the archive"):
        assert f"skipped  {task}" in r.stderr, r.stderr
    assert "changed=0" in r.stderr and "failed=0" in r.stderr, r.stderr


def test_playbook_passes_syntax_check_and_lint() -> None:
    playbook = need_ansible()
    r = subprocess.run([playbook, "--syntax-check", "-i",
                        "playbooks/inventory.ini", "playbooks/site.yml"], capture_output=True,
                       text=True, cwd=REPO)
    assert r.returncode == 0, r.stdout + r.stderr
    lint = tool("ansible-lint")
    if lint is None:
        pytest.skip("needs ansible-lint (pip install -e '.[test]')")
    r = subprocess.run([lint, "site.yml"], capture_output=True, text=True,
                       cwd=REPO / "playbooks")
    assert r.returncode == 0, r.stdout + r.stderr


def test_vagrantfile_validates() -> None:
    if shutil.which("vagrant") is None:
        pytest.skip("needs vagrant (apt install vagrant)")
    r = subprocess.run(["vagrant", "validate", "--ignore-provider"], capture_output=True,
                       text=True, cwd=REPO, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


def test_roles_follow_ansible_layout() -> None:
    roles = REPO / "playbooks" / "roles"
    for role in ("base", "mininet", "p4", "kernel_modules", "testbed"):
        for part in ("tasks", "defaults", "handlers", "meta"):
            assert (roles / role / part / "main.yml").is_file(), f"{role}/{part}"
