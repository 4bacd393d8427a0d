"""What a command costs around its work: the imports before, the exit after (no root)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _python(code: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, cwd=cwd)


def test_the_quick_exit_keeps_what_the_normal_exit_does(tmp_path: Path) -> None:
    """leave() skips the interpreter's teardown, not what a user would miss: atexit handlers,
    a thread still writing, a file never closed, the status and the message."""
    code = f"""
import atexit, threading, time
from pathlib import Path
from testbed.cli.quick_exit import leave
out = Path({str(tmp_path)!r})
atexit.register(lambda: (out / "atexit").write_text("ran"))
def late():
    time.sleep(0.3)
    (out / "thread").write_text("done")
threading.Thread(target=late).start()
f = open(out / "open", "w")
f.write("buffered, never closed")
print("to stdout", end="")
leave("the message")
"""
    r = _python(code)
    assert r.returncode == 1
    assert r.stdout == "to stdout"
    assert r.stderr.strip() == "the message"
    assert (tmp_path / "atexit").read_text() == "ran"
    assert (tmp_path / "thread").read_text() == "done"
    assert (tmp_path / "open").read_text() == "buffered, never closed"
    for status, expect in (("None", 0), ("0", 0), ("3", 3)):
        r = _python(f"from testbed.cli.quick_exit import leave; leave({status})")
        assert (r.returncode, r.stderr) == (expect, "")


def test_the_testbed_command_leaves_through_the_quick_exit() -> None:
    assert 'testbed = "testbed.cli:main"' in (REPO / "pyproject.toml").read_text()
    r = subprocess.run([sys.executable, "-m", "testbed.cli", "up", "--spines", "x"],
                       capture_output=True, text=True, timeout=60, cwd=REPO)
    assert r.returncode == 2 and "--spines" in r.stderr and "Traceback" not in r.stderr


def test_mininet_comes_without_setuptools_where_the_standard_library_has_distutils() -> None:
    """Mininet imports distutils.version; setuptools' shim would bring all of setuptools and
    pkg_resources with it (0.25 s of every bring-up). Where Python still has its own distutils,
    the testbed takes that one; elsewhere (Python 3.12+) Mininet must import all the same."""
    r = _python("import importlib.machinery as m, sys, warnings\n"
                "warnings.simplefilter('error')\n"
                "own = m.PathFinder.find_spec('distutils') is not None\n"
                "import testbed.fabric.network\n"
                "print(own, 'setuptools' in sys.modules, 'mininet.node' in sys.modules)")
    assert r.returncode == 0, r.stderr
    own, setuptools, mininet = r.stdout.split()
    assert mininet == "True"
    if own == "True":
        assert setuptools == "False"
