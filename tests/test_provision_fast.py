"""BMv2's fast build on every install path (role p4): an archive by URL, checked against its
sha256 before anything is unpacked, and the pinned behavioral-model commit, cloned and built.

The playbook's own tasks run here, against stand-ins: an archive served by a local HTTP server
on 127.0.0.1, and a local git repository in place of upstream behavioral-model whose "build" is
a few lines of shell, so nothing reaches the network and nothing takes half an hour. Every path
the tasks write (the unpack root, the prefix, root's working folder) is moved into the test's
temporary folder: /opt and /var/lib are not touched."""

from __future__ import annotations

import functools
import hashlib
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.test_provision import CLI, REPO, need_ansible

ROLE = REPO / "playbooks" / "roles" / "p4"
DEFAULTS = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
FAKE_SWITCH = "#!/bin/sh\necho fast-build-stand-in\n"
NO_CHECKSUM = ("--bmv2-fast-url needs --bmv2-fast-sha256: give the archive's sha256 too "
               "(sha256sum FILE prints it)")
PLAYBOOK_NO_CHECKSUM = ("p4_bmv2_fast_url is set without p4_bmv2_fast_sha256: give the "
                        "archive's sha256 too (--bmv2-fast-sha256 HEX; sha256sum FILE prints it)")


def need(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        pytest.skip(f"needs {name} (apt install {name})")
    return found


def run_book(tmp_path: Path, plays: str, extravars: dict,
             *args: str) -> subprocess.CompletedProcess:
    """ansible-playbook on localhost with ``plays`` (YAML) and ``extravars`` (the highest
    precedence, so they redirect the role's paths whatever its defaults say)."""
    playbook = need_ansible()
    book, extra = tmp_path / "book.yml", tmp_path / "extravars.json"
    book.write_text(plays)
    extra.write_text(json.dumps(extravars))
    env = {**os.environ, "ANSIBLE_ROLES_PATH": str(REPO / "playbooks" / "roles"),
           "ANSIBLE_NOCOLOR": "1", "ANSIBLE_RETRY_FILES_ENABLED": "0",
           "PATH": f"{Path(playbook).parent}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
    return subprocess.run(
        [playbook, "-i", "localhost,", "-c", "local", "-e", f"@{extra}",
         "-e", f"ansible_python_interpreter={sys.executable}", *args, str(book)],
        capture_output=True, text=True, timeout=900, env=env, cwd=tmp_path)


def whole_role(tmp_path: Path, extravars: dict, *args: str) -> subprocess.CompletedProcess:
    """Role p4 as site.yml runs it (its pre_tasks' check, then main.yml), without the tasks
    that need the internet (tag p4repo)."""
    return run_book(tmp_path, (
        "- name: Role p4 with its paths moved\n  hosts: all\n  gather_facts: true\n"
        "  pre_tasks:\n    - name: Check the settings before any role runs\n"
        f"      ansible.builtin.import_tasks: {ROLE}/tasks/fast_settings.yml\n"
        "      tags: [always]\n  roles:\n    - role: p4\n"), extravars, "--skip-tags", "p4repo",
        *args)


def task_file(tmp_path: Path, name: str, extravars: dict,
              *args: str) -> subprocess.CompletedProcess:
    return run_book(tmp_path, (
        "- name: One of role p4's task files\n  hosts: all\n  gather_facts: false\n"
        "  tasks:\n    - name: The task file\n      ansible.builtin.include_role:\n"
        f"        name: p4\n        tasks_from: {name}\n"), extravars, *args)


def recap(r: subprocess.CompletedProcess) -> dict[str, int]:
    m = re.search(r"localhost\s*:\s*(.*)", r.stdout.split("PLAY RECAP")[-1])
    assert m, r.stdout + r.stderr
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", m.group(1))}


def moved(tmp_path: Path) -> dict:
    """The role's paths inside ``tmp_path``, and no packages (this machine's are its own). The
    unpack root exists, as / does."""
    root = tmp_path / "root"
    root.mkdir(exist_ok=True)
    return {"p4_bmv2_fast_root": str(root), "p4_bmv2_fast_prefix": str(root / "opt/bmv2-fast"),
            "p4_bmv2_fast_workdir": str(tmp_path / "work"),
            "p4_archive_runtime_packages": [], "p4_bmv2_build_packages": []}


def everything_under(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*")) if path.exists() else []


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A fast-build stand-in archive (opt/bmv2-fast/bin/simple_switch_grpc, a script) served on
    127.0.0.1: its URL and its sha256."""
    need("zstd")
    stage, www = tmp_path / "stage", tmp_path / "www"
    switch = stage / "opt" / "bmv2-fast" / "bin" / "simple_switch_grpc"
    switch.parent.mkdir(parents=True)
    www.mkdir()
    switch.write_text(FAKE_SWITCH)
    switch.chmod(0o755)
    archive = www / "bmv2-fast-test.tar.zst"
    subprocess.run(["tar", "-C", str(stage), "--numeric-owner", "--owner=0", "--group=0",
                    "--zstd", "-cf", str(archive), "opt"], check=True)
    handler = functools.partial(Quiet, directory=str(www))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield (f"http://127.0.0.1:{server.server_address[1]}/{archive.name}",
               hashlib.sha256(archive.read_bytes()).hexdigest())
    finally:
        server.shutdown()
        server.server_close()


# --- the URL path ------------------------------------------------------------------------------

@pytest.mark.root
def test_an_archive_by_url_is_checked_then_unpacked(tmp_path: Path, served) -> None:
    url, sha = served
    extravars = {**moved(tmp_path), "p4_bmv2_fast_url": url, "p4_bmv2_fast_sha256": sha}
    r = whole_role(tmp_path, extravars)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"BMv2's fast build: from {url}, checked against sha256 {sha}" in r.stdout
    switch = tmp_path / "root" / "opt" / "bmv2-fast" / "bin" / "simple_switch_grpc"
    out = subprocess.run([str(switch)], capture_output=True, text=True, check=True)
    assert out.stdout == "fast-build-stand-in\n"
    work, download = tmp_path / "work", tmp_path / "work" / "bmv2-fast.tar.zst"
    for path, mode in ((work, 0o700), (download, 0o600)):  # root's own: no other user writes
        st = path.stat()
        assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (0, 0, mode), path
    assert hashlib.sha256(download.read_bytes()).hexdigest() == sha
    again = whole_role(tmp_path, extravars)  # CI's second provisioning: nothing changes
    assert again.returncode == 0, again.stdout + again.stderr
    assert recap(again)["changed"] == 0, again.stdout
    assert f"BMv2's fast build: present in {tmp_path}/root/opt/bmv2-fast" in again.stdout


@pytest.mark.root
def test_a_dry_run_with_a_url_downloads_and_unpacks_nothing(tmp_path: Path, served) -> None:
    url, sha = served
    r = whole_role(tmp_path, {**moved(tmp_path), "p4_bmv2_fast_url": url,
                              "p4_bmv2_fast_sha256": sha}, "--check")
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"dry run: {url} would be downloaded into {tmp_path}/work" in r.stdout, r.stdout
    assert everything_under(tmp_path / "root") == []
    assert not (tmp_path / "work").exists()


@pytest.mark.root
def test_a_wrong_checksum_fails_and_leaves_nothing_unpacked(tmp_path: Path, served) -> None:
    url, sha = served
    wrong = hashlib.sha256(b"some other archive").hexdigest()
    r = whole_role(tmp_path, {**moved(tmp_path), "p4_bmv2_fast_url": url,
                              "p4_bmv2_fast_sha256": wrong})
    assert r.returncode != 0, r.stdout + r.stderr
    assert "Download the fast BMv2 archive, checked against its sha256" in r.stdout
    assert re.search(r"checksum .*did not match", r.stdout), r.stdout
    assert recap(r)["failed"] == 1
    assert everything_under(tmp_path / "root") == []  # nothing unpacked
    assert everything_under(tmp_path / "work") == []  # and the download not kept


@pytest.mark.root
def test_a_url_without_its_checksum_is_refused_before_any_role_runs(tmp_path: Path) -> None:
    r = whole_role(tmp_path, {**moved(tmp_path), "p4_bmv2_fast_url": "http://127.0.0.1:9/x"})
    assert r.returncode != 0, r.stdout + r.stderr
    assert PLAYBOOK_NO_CHECKSUM in r.stdout, r.stdout
    assert "Look for an installed P4 toolchain" not in r.stdout  # role p4 never started
    assert recap(r) | {"ok": 0} == {"ok": 0, "changed": 0, "unreachable": 0, "failed": 1,
                                    "skipped": 0, "rescued": 0, "ignored": 0}
    assert everything_under(tmp_path / "root") == everything_under(tmp_path / "work") == []
    # fast_url.yml checks again by itself, before it makes its folder or downloads
    r = task_file(tmp_path, "fast_url.yml", {**moved(tmp_path),
                                            "p4_bmv2_fast_url": "http://127.0.0.1:9/x"})
    assert r.returncode != 0 and PLAYBOOK_NO_CHECKSUM in r.stdout, r.stdout + r.stderr
    assert not (tmp_path / "work").exists()


@pytest.mark.parametrize(("options", "message"), [
    (["--bmv2-fast-url", "http://127.0.0.1:9/x.tar.zst"], NO_CHECKSUM),
    (["--bmv2-fast-url", "http://127.0.0.1:9/x.tar.zst", "--bmv2-fast-sha256", "abc"],
     "--bmv2-fast-sha256: abc is not 64 hex digits: give the archive's sha256 "
     "(sha256sum FILE prints it)"),
    (["--bmv2-fast-sha256", "0" * 64],
     "--bmv2-fast-sha256 is the checksum of a download: give --bmv2-fast-url URL too"),
    (["--bmv2-fast-url", "x.tar.zst", "--bmv2-fast-sha256", "0" * 64],
     "--bmv2-fast-url: x.tar.zst is not a URL: give one such as "
     "https://host/bmv2-fast-debian12-amd64.tar.zst"),
], ids=["no-checksum", "not-hex", "no-url", "not-a-url"])
def test_the_cli_refuses_a_download_without_its_checksum_in_one_line(
        options: list[str], message: str) -> None:
    """Before anything runs, and before asking for root."""
    r = subprocess.run([*CLI, "provision", "--check", *options], capture_output=True, text=True,
                       timeout=120, cwd=REPO)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.strip() == f"error: {message}", r.stderr


def test_the_cli_passes_the_fast_build_options_to_the_playbook() -> None:
    from testbed.cli.provision import fast_download_vars, playbook_vars

    sha = "AB" * 32
    assert fast_download_vars("https://example.org/f.tar.zst", sha) == {
        "p4_bmv2_fast_url": "https://example.org/f.tar.zst", "p4_bmv2_fast_sha256": sha.lower()}
    assert fast_download_vars(None, None) == {}
    assert playbook_vars() == {}  # the playbook's defaults: online, the pinned build
    assert playbook_vars(bmv2_fast_build=False) == {"p4_bmv2_fast_build": False}
    url = "https://example.org/f.tar.zst"
    assert playbook_vars(bmv2_fast_url=url, bmv2_fast_sha256=sha) == fast_download_vars(url, sha)


@pytest.mark.parametrize("url", ["--bmv2-fast-url=http://127.0.0.1:9/x", "--bmv2-fast-url"])
def test_setup_sh_refuses_a_download_without_its_checksum_first(tmp_path: Path, url: str) -> None:
    """setup.sh checks before it asks for root, makes .venv or installs anything: run from a
    copy, with an `id` that says "not root", so that a missing check could do no harm."""
    copy, fake = tmp_path / "setup.sh", tmp_path / "bin" / "id"
    shutil.copy(REPO / "setup.sh", copy)
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 1000\n")
    fake.chmod(0o755)
    args = [url] if "=" in url else [url, "http://127.0.0.1:9/x"]
    r = subprocess.run(["bash", str(copy), "--check", *args], capture_output=True, text=True,
                       timeout=60, env={**os.environ, "PATH": f"{fake.parent}:/usr/bin:/bin"})
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.strip() == f"error: {NO_CHECKSUM}", r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bin", "setup.sh"]  # no .venv
    ok = subprocess.run(["bash", str(copy), *args, "--bmv2-fast-sha256", "0" * 64],
                        capture_output=True, text=True, timeout=60,
                        env={**os.environ, "PATH": f"{fake.parent}:/usr/bin:/bin"})
    assert "run it as  sudo ./setup.sh" in ok.stderr, ok.stderr  # past the check, at the next


# --- the pinned commit -------------------------------------------------------------------------

def test_the_pinned_commit_is_the_archives_full_commit_id() -> None:
    """The archive and docs/TOOLCHAIN.md name behavioral-model 9674187f; the role pins all 40
    hex digits of it (an abbreviation could come to name another commit)."""
    commit = DEFAULTS["p4_bmv2_fast_commit"]
    assert re.fullmatch(r"[0-9a-f]{40}", commit) and commit.startswith("9674187f")
    assert commit in (REPO / "docs" / "TOOLCHAIN.md").read_text()
    assert DEFAULTS["p4_bmv2_fast_repo"] == "https://github.com/p4lang/behavioral-model.git"
    assert DEFAULTS["p4_bmv2_fast_build"] is True
    assert DEFAULTS["p4_bmv2_fast_workdir"].startswith("/var/lib/roce-testbed/")


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t.invalid", *args],
                          cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def upstream(tmp_path: Path) -> tuple[Path, str]:
    """A stand-in for behavioral-model: an autogen.sh, a configure that records its arguments
    and a Makefile that installs a script as simple_switch_grpc; the commit to pin says
    "pinned", a newer one on top of it says "newer"."""
    need("git")
    need("make")
    repo = tmp_path / "behavioral-model"
    repo.mkdir()
    files = {
        "configure.ac": "AC_INIT([stand-in], [0.1])\n",
        "autogen.sh": "#!/bin/sh\ncp configure.sh configure\nchmod +x configure\n",
        "configure.sh": ('#!/bin/sh\nfor a in "$@"; do case "$a" in --prefix=*) '
                         'echo "prefix=${a#--prefix=}" > config.mk ;; esac; done\n'
                         'echo "$@" > config.status\n'),
        "Makefile": ("include config.mk\nall:\ninstall:\n\tmkdir -p $(prefix)/bin\n"
                     "\tinstall -m 0755 switch.sh $(prefix)/bin/simple_switch_grpc\n"),
        "switch.sh": "#!/bin/sh\necho pinned\n",
    }
    for name, text in files.items():
        (repo / name).write_text(text)
        (repo / name).chmod(0o755 if name.endswith(".sh") else 0o644)
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "the pinned commit")
    pinned = git(repo, "rev-parse", "HEAD")
    (repo / "switch.sh").write_text("#!/bin/sh\necho newer\n")
    git(repo, "commit", "-qam", "a newer commit")
    return repo, pinned


@pytest.mark.root
def test_the_pinned_commit_is_cloned_and_built(tmp_path: Path, upstream) -> None:
    repo, pinned = upstream
    extravars = {**moved(tmp_path), "p4_bmv2_fast_repo": str(repo),
                 "p4_bmv2_fast_commit": pinned}
    dry = task_file(tmp_path, "fast_pinned.yml", extravars, "--check")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert not (tmp_path / "work").exists()  # a dry run clones and builds nothing
    r = task_file(tmp_path, "fast_pinned.yml", extravars)
    assert r.returncode == 0, r.stdout + r.stderr
    checkout = tmp_path / "work" / "behavioral-model"
    assert git(checkout, "rev-parse", "HEAD") == pinned != git(repo, "rev-parse", "HEAD")
    st = (tmp_path / "work").stat()
    assert (st.st_uid, st.st_mode & 0o777) == (0, 0o700)
    assert (checkout.stat().st_uid, (checkout / "Makefile").stat().st_uid) == (0, 0)
    prefix = tmp_path / "root" / "opt" / "bmv2-fast"
    configured = (checkout / "config.status").read_text().split()
    for arg in (f"--prefix={prefix}", "--with-pi", "--with-thrift", "--disable-logging-macros",
                "--disable-elogger"):
        assert arg in configured
    out = subprocess.run([str(prefix / "bin" / "simple_switch_grpc")], capture_output=True,
                         text=True, check=True)
    assert out.stdout == "pinned\n"  # built from the pinned commit, not upstream's newest
    again = task_file(tmp_path, "fast_pinned.yml", extravars)
    assert again.returncode == 0, again.stdout + again.stderr
    assert recap(again)["changed"] == 0, again.stdout


@pytest.mark.root
def test_a_pinned_commit_upstream_lacks_fails_and_builds_nothing(tmp_path: Path,
                                                                  upstream) -> None:
    repo, _ = upstream
    r = task_file(tmp_path, "fast_pinned.yml", {**moved(tmp_path), "p4_bmv2_fast_repo": str(repo),
                                                "p4_bmv2_fast_commit": "0" * 40})
    assert r.returncode != 0, r.stdout + r.stderr
    assert "Clone behavioral-model at the pinned commit" in r.stdout
    assert everything_under(tmp_path / "root") == []


@pytest.mark.root
@pytest.mark.parametrize(("build", "says"), [
    (True, "BMv2's fast build: built from https://github.com/p4lang/behavioral-model.git at "
           f"{DEFAULTS['p4_bmv2_fast_commit']}"),
    (False, "BMv2's fast build: not wanted (p4_bmv2_fast_build is false)"),
], ids=["online-default", "opted-out"])
def test_the_online_default_is_the_pinned_build(tmp_path: Path, build: bool, says: str) -> None:
    """With no archive, URL or checkout, the role builds the pinned commit unless told not to;
    the build is tagged p4repo (it needs GitHub), so --skip-tags p4repo leaves it out."""
    r = whole_role(tmp_path, {**moved(tmp_path), "p4_bmv2_fast_build": build})
    assert r.returncode == 0, r.stdout + r.stderr
    assert says in r.stdout, r.stdout
    assert "Clone behavioral-model at the pinned commit" not in r.stdout  # p4repo: skipped
    assert recap(r)["changed"] == 0
    assert everything_under(tmp_path / "root") == everything_under(tmp_path / "work") == []


def test_the_pinned_build_needs_the_internet_tag_and_comes_after_the_repository() -> None:
    """It needs PI, so it runs after the p4lang repository's install, and GitHub, so it is
    tagged p4repo like that install (offline machines skip both with --skip-tags p4repo)."""
    tasks = yaml.safe_load((ROLE / "tasks" / "main.yml").read_text())
    names = [t["name"] for t in tasks]
    pinned = names.index("Build the fast BMv2 build from the pinned behavioral-model commit")
    assert pinned > names.index("Install from the p4lang repository")
    assert tasks[pinned]["tags"] == ["p4repo"]
