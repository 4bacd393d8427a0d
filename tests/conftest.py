"""Shared fixtures and the skip rules that name what a test needs."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from testbed.machine.state import fabric_lock

REPO = Path(__file__).resolve().parent.parent


def need_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces, veths, tc); run pytest with sudo")


def need_bmv2() -> None:
    need_root()
    for tool in ("simple_switch_grpc", "simple_switch_CLI"):
        if shutil.which(tool) is None:
            pytest.skip(f"needs BMv2: {tool} is not installed (see `testbed doctor`)")
    try:
        import mininet.net  # noqa: F401
    except ImportError:
        pytest.skip("needs Mininet: apt install mininet, venv with --system-site-packages")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--seed", action="append", type=int, default=[],
                     help="replay these lossless property cases (tests/lossless_cases.py)")
    parser.addoption("--ptf-order-seed", action="append", type=int, default=[],
                     help="also run the PTF suite in a random order with this seed")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "lossless_seed" in metafunc.fixturenames:
        from tests.test_lossless_property import DEFAULT_SEEDS

        seeds = metafunc.config.getoption("--seed") or DEFAULT_SEEDS
        metafunc.parametrize("lossless_seed", seeds)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """Held around setup, call and teardown, so a module fixture's fabric is covered too."""
    if not (item.get_closest_marker("bmv2") or item.get_closest_marker("root")) or (
            os.geteuid() != 0):  # skipped without root; the lock is root's (testbed.machine.state)
        yield
        return
    with fabric_lock():  # one fabric at a time: their names are machine-wide
        yield


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("bmv2"):
        need_bmv2()
    elif item.get_closest_marker("root"):
        need_root()


#: Set by CI once the toolchain is installed: a test skipped for want of a tool is then a
#: failure, and so is a test left out of the run (deselected by -m or -k) unless it is in the
#: slow set (the extended repeats beyond what CI runs), so a green run cannot hide switch,
#: PFC, deadlock, lab or PTF tests that never ran.
NO_SKIPS_ENV = "ROCE_TESTBED_NO_SKIPS"
_skipped: list[str] = []
_deselected: list[str] = []


def pytest_deselected(items: list[pytest.Item]) -> None:
    _deselected.extend(i.nodeid for i in items if not i.get_closest_marker("slow"))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        _skipped.append(f"{report.nodeid}: {reason}")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if os.environ.get(NO_SKIPS_ENV) != "1":
        return
    if _skipped:
        print(f"\n{NO_SKIPS_ENV}=1 and {len(_skipped)} test(s) skipped:")
        for line in _skipped:
            print(f"  SKIPPED {line}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if _deselected:
        print(f"\n{NO_SKIPS_ENV}=1 and {len(_deselected)} test(s) outside the slow set were "
              "deselected:")
        for nodeid in _deselected:
            print(f"  DESELECTED {nodeid}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
