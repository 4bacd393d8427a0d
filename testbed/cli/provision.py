"""`testbed provision`: run playbooks/site.yml on this machine through ansible-runner.

setup.sh runs it on a bare machine, in the Vagrant VM, in the Docker image and in CI; this
module only drives it locally, reports progress per task, and sums the run up so that a failure
names the task that failed and what it said.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

PLAYBOOK = Path(__file__).resolve().parents[2] / "playbooks" / "site.yml"


@dataclass
class TaskFailure:
    task: str
    host: str
    message: str


@dataclass
class ProvisionResult:
    status: str  # ansible-runner's: successful, failed, timeout, canceled
    rc: int
    ok: int = 0
    changed: int = 0
    failed: int = 0
    skipped: int = 0
    unreachable: int = 0
    failures: list[TaskFailure] = field(default_factory=list)
    changed_tasks: list[str] = field(default_factory=list)

    @property
    def success(self) -> bool:
        return self.rc == 0 and self.failed == 0 and self.unreachable == 0

    def summary(self) -> str:
        s = (f"ok={self.ok} changed={self.changed} failed={self.failed} skipped={self.skipped} "
             f"unreachable={self.unreachable}")
        for f in self.failures:
            s += f"\nFAILED: {f.task}: {f.message}"
        return s


SHA256 = re.compile(r"[0-9a-fA-F]{64}")


def fast_download_vars(url: str | None, sha256: str | None) -> dict[str, str]:
    """The playbook's variables for BMv2's fast build by URL (role p4, fast_url.yml), or
    ValueError with a one-line message naming the option and the fix: a download is taken only
    with its checksum, refused before anything runs (the playbook refuses it too)."""
    if url is None and sha256 is None:
        return {}
    if url is None:
        raise ValueError("--bmv2-fast-sha256 is the checksum of a download: give "
                         "--bmv2-fast-url URL too")
    if "://" not in url:
        raise ValueError(f"--bmv2-fast-url: {url} is not a URL: give one such as "
                         "https://host/bmv2-fast-debian12-amd64.tar.zst")
    if not sha256:
        raise ValueError("--bmv2-fast-url needs --bmv2-fast-sha256: give the archive's sha256 "
                         "too (sha256sum FILE prints it)")
    if not SHA256.fullmatch(sha256):
        raise ValueError(f"--bmv2-fast-sha256: {sha256} is not 64 hex digits: give the "
                         "archive's sha256 (sha256sum FILE prints it)")
    return {"p4_bmv2_fast_url": url, "p4_bmv2_fast_sha256": sha256.lower()}


def playbook_vars(toolchain_archive: Path | None = None, bmv2_fast_archive: Path | None = None,
                  bmv2_fast_source: Path | None = None, bmv2_fast_url: str | None = None,
                  bmv2_fast_sha256: str | None = None, bmv2_fast_build: bool = True,
                  ) -> dict[str, str | bool]:
    """The playbook's variables for `testbed provision`'s options (role p4's defaults say what
    they do), or ValueError with a one-line message naming the option and the fix."""
    extravars: dict[str, str | bool] = {}
    for var, given in (("p4_toolchain_archive", toolchain_archive),
                       ("p4_bmv2_fast_archive", bmv2_fast_archive),
                       ("p4_bmv2_fast_source", bmv2_fast_source)):
        if given is not None:
            if not (given.is_dir() if var.endswith("source") else given.is_file()):
                raise ValueError(f"--{var.removeprefix('p4_').replace('_', '-')}: "
                                 f"no such file {given}")
            extravars[var] = str(given.resolve())
    extravars |= fast_download_vars(bmv2_fast_url, bmv2_fast_sha256)
    if not bmv2_fast_build:
        extravars["p4_bmv2_fast_build"] = False
    return extravars


def _message(res: dict) -> str:
    parts = []
    for key in ("msg", "stderr", "reason"):
        v = res.get(key)
        if isinstance(v, list):
            v = "; ".join(map(str, v))
        if v and str(v).strip():
            parts.append(str(v).strip().splitlines()[-1] if key == "stderr"
                         else str(v).strip().splitlines()[0])
    return ": ".join(parts) or "failed"


def _note(action: str, res: dict) -> str:
    """What a debug task said (the role's own report: what is missing, where it comes from)."""
    if not action.endswith("debug"):
        return ""
    items = res.get("results") or [res]
    return "\n".join(str(r["msg"]).strip() for r in items
                     if r.get("msg") and not r.get("skipped"))


def _cmdline(check: bool, tags: str | None, skip_tags: str | None) -> str | None:
    """ansible-playbook's options for a dry run and tag selection."""
    args = ["--check"] if check else []
    if tags:
        args += ["--tags", tags]
    if skip_tags:
        args += ["--skip-tags", skip_tags]
    return " ".join(args) or None


def run_playbook(
    playbook: Path = PLAYBOOK,
    *,
    check: bool = False,
    tags: str | None = None,
    skip_tags: str | None = None,
    extravars: dict | None = None,
    on_task: Callable[[str, str, str], None] | None = None,
) -> ProvisionResult:
    """Run ``playbook`` against localhost; ``on_task(name, outcome, note)`` is called as tasks
    end, ``note`` being what a debug task said ("" for other tasks)."""
    import ansible_runner  # heavy import: only when provisioning

    # ansible-runner starts ansible-playbook from the PATH: put this environment's first, so
    # that `sudo .venv/bin/testbed provision` works without activating the venv.
    venv_bin = str(Path(sys.executable).parent)
    path = f"{venv_bin}:{os.environ.get('PATH', '/usr/sbin:/usr/bin:/sbin:/bin')}"
    if shutil.which("ansible-playbook", path=path) is None:
        raise RuntimeError("ansible-playbook is not installed: pip install ansible-core")
    result_events: list[dict] = []
    changed_tasks: list[str] = []

    def handler(ev: dict) -> bool:
        kind = ev.get("event", "")
        data = ev.get("event_data", {})
        task = data.get("task", "")
        if kind in ("runner_on_ok", "runner_on_failed", "runner_on_skipped",
                    "runner_on_unreachable"):
            res = data.get("res", {}) or {}
            outcome = {"runner_on_ok": "changed" if res.get("changed") else "ok",
                       "runner_on_failed": "ignored" if data.get("ignore_errors") else "failed",
                       "runner_on_skipped": "skipped",
                       "runner_on_unreachable": "unreachable"}[kind]
            if outcome == "changed":
                changed_tasks.append(task)
            if outcome in ("failed", "unreachable"):
                result_events.append({"task": task, "host": data.get("host", ""),
                                      "message": _message(res)})
            if on_task:
                on_task(task, outcome, _note(data.get("task_action", ""), res))
        return True

    cmdline = _cmdline(check, tags, skip_tags)
    with tempfile.TemporaryDirectory(prefix="roce-provision-") as tmp:
        r = ansible_runner.run(
            private_data_dir=tmp,
            project_dir=str(playbook.parent),
            playbook=str(playbook),
            inventory="localhost ansible_connection=local ansible_python_interpreter="
                      "/usr/bin/python3",
            extravars=extravars or {},
            cmdline=cmdline,
            event_handler=handler,
            quiet=True,
            envvars={"ANSIBLE_ROLES_PATH": str(playbook.parent / "roles"),
                     "ANSIBLE_NOCOLOR": "1", "PATH": path},
        )
        try:
            stats = r.stats or {}
        except Exception:  # ansible never got as far as a summary
            stats = {}
        if not stats and not result_events:
            out = Path(tmp, "artifacts", r.config.ident, "stdout")
            text = out.read_text(errors="replace").strip() if out.exists() else ""
            result_events.append({"task": "(start ansible-playbook)", "host": "localhost",
                                  "message": text.splitlines()[-1] if text else r.status})

    def total(key: str) -> int:
        return sum((stats.get(key) or {}).values())

    return ProvisionResult(
        status=r.status, rc=r.rc, ok=total("ok"), changed=total("changed"),
        failed=total("failures") or (1 if r.rc and not stats else 0),
        skipped=total("skipped"), unreachable=total("dark"),
        failures=[TaskFailure(**e) for e in result_events], changed_tasks=changed_tasks)
