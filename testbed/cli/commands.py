"""The `testbed` command."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table
from rich.text import Text

from testbed.cli.budget import budget_or_exit, calibrate
from testbed.cli.conformance import conformance
from testbed.cli.output import console, print_agents, print_fidelity, print_run
from testbed.cli.output import say as _say
from testbed.config.models import ConfigError, FabricConfig
from testbed.labs.cli import lab_app
from testbed.machine.owner import for_sudo_user
from testbed.machine.safepath import UnsafePath
from testbed.topology.validate import explain, load_config, parse_config

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="roce-testbed: an emulated lossless-Ethernet (RoCEv2) lab.")
def _progress(msg: str) -> None:
    _say((">", "cyan"), " ", msg)


def _fail(msg: str, code: int = 2) -> None:
    _say(("error:", "red"), " ", msg)
    raise typer.Exit(code)


def _fabric_config(config: Path | None, overrides: dict) -> FabricConfig:
    """A YAML file if given, with any flags on top; flags alone otherwise."""
    data: dict = {}
    if config is not None:
        data = load_config(config).model_dump(mode="json")
    shape = data.setdefault("fabric", {})
    for key, value in overrides.items():
        if value is not None:
            shape[key] = value
    return parse_config(data, str(config) if config else "command line")


def _switch_or_exit(cfg: FabricConfig, log: bool, build: str | None) -> FabricConfig:
    """The config with the command line's --log and --build, validated as if written in it."""
    switch = {**cfg.switch.model_dump(), **({"log": True} if log else {}),
              **({"build": build} if build else {})}
    try:
        cfg.switch = type(cfg.switch).model_validate(switch)
    except ValidationError as err:
        _fail("; ".join(p.removeprefix("(top level): ")
                        for p in explain(type(cfg.switch), err)).replace("switch.log is on",
                                                                         "--log is given"))
    return cfg


def _config_or_exit(config: Path | None, **shape) -> FabricConfig:
    """The fabric config from a file and/or shape flags; a clear message and exit on mistakes."""
    try:
        return _fabric_config(config, shape)
    except ConfigError as exc:
        _fail(exc.render())
        raise  # unreachable: _fail exits


@app.command()
def up(
    config: Annotated[Path | None, typer.Argument(help="Fabric YAML file.")] = None,
    spines: Annotated[int | None, typer.Option(help="Spine switches.")] = None,
    leaves: Annotated[int | None, typer.Option(help="Leaf switches.")] = None,
    hosts_per_leaf: Annotated[int | None, typer.Option(help="Hosts per leaf.")] = None,
    parallel_links: Annotated[int | None, typer.Option(help="Links per spine-leaf pair.")] = None,
    pingall: Annotated[bool, typer.Option(help="Ping every host pair, then exit.")] = False,
    exec_: Annotated[list[str] | None, typer.Option(
        "--exec", help="Run 'NODE COMMAND' (e.g. 'h1 ping -c1 10.0.2.1'), then exit; repeatable.")
    ] = None,
    results: Annotated[Path, typer.Option(help="Where results folders are written.")] = Path(
        "results"),
    log: Annotated[bool, typer.Option(help="Write a (size-capped) BMv2 log per switch (needs "
                                      "BMv2's default build, which --log picks).")] = False,
    build: Annotated[str | None, typer.Option(
        help="BMv2 build: auto, default or fast (switch.build).")] = None,
    endpoints: Annotated[bool, typer.Option(
        help="Start a RoCEv2 endpoint on every host (see traffic/endpoint.py).")] = False,
) -> None:
    """Bring a leaf-spine fabric up and open the Mininet CLI (or run --pingall / --exec)."""
    if os.geteuid() != 0:
        _fail("the testbed needs root for namespaces and veths: run it with sudo")
    cfg = _config_or_exit(config, spines=spines, leaves=leaves, hosts_per_leaf=hosts_per_leaf,
                          parallel_links=parallel_links)
    cfg = _switch_or_exit(cfg, log=log, build=build)

    from testbed.topology.graph import build_topology

    topo = build_topology(cfg)
    with for_sudo_user(results):
        status = _up(cfg, topo, results, endpoints, pingall, exec_)
    raise typer.Exit(status)


def _up(cfg: FabricConfig, topo, results: Path, endpoints: bool, pingall: bool,
        exec_: list[str] | None) -> int:
    """`testbed up` from bring-up to teardown; its exit status."""
    from testbed.control.p4runtime import ControlPlaneError
    from testbed.fabric.bmv2 import SwitchStartError
    from testbed.fabric.network import FabricError
    from testbed.run.bringup import Fabric
    from testbed.run.lifecycle import Run, interrupt_on_sigterm

    run_ctx = Run.named(cfg, topo, results, progress=_progress)
    run_dir = run_ctx.results_dir
    interrupt_on_sigterm()
    fabric = Fabric(cfg, topo, run_dir, run=run_ctx)
    status = 0
    t0 = time.monotonic()
    try:
        try:
            fabric.start()
        except (SwitchStartError, ControlPlaneError, FabricError, UnsafePath) as exc:
            _fail(str(exc), 1)
        _say(("fabric up", "green"),
             f": {len(topo.spines)} spines, {len(topo.leaves)} leaves, {len(topo.hosts)} hosts "
             f"in {time.monotonic() - t0:.2f} s; results in {run_dir}")
        if endpoints:
            fabric.start_endpoints()
            _say(f"RoCE endpoints running; from the Mininet CLI, e.g.: h1 {sys.executable} -m "
                 f"traffic.client {fabric.endpoint_socket('h1')} stats")
        if pingall:
            ok, sent = fabric.pingall()
            loss = 100.0 * (sent - ok) / sent if sent else 0.0
            console.print(f"pingall: {ok}/{sent} answered ({loss:.0f}% loss)")
            status = 0 if ok == sent else 1
        status = _run_exec(fabric, exec_ or [], status)
        if not pingall and not exec_:
            from testbed.cli.mncli import TestbedCLI

            _say("Mininet CLI; testbed commands: pfcwd [SWITCH], ports SWITCH")
            TestbedCLI(fabric.net, fabric)
    except KeyboardInterrupt:
        console.print("interrupted: tearing the fabric down")
        status = 130
    finally:
        fabric.stop()
        summary = run_ctx.telemetry_summary()
        if summary is not None:
            print_agents(summary.get("agents"))
            print_fidelity(summary.get("fidelity"))
    return status


def _run_exec(fabric, commands: list[str], status: int) -> int:
    """Run each --exec 'NODE COMMAND' on its node, echoing its output; the first non-zero exit
    status becomes the command's (``status`` if it already failed)."""
    for line in commands:
        node_name, _, command = line.partition(" ")
        try:
            node = fabric.host(node_name)
        except KeyError:
            _fail(f"--exec: no node named {node_name!r}")
        out = node.cmd(f"{command} ; echo __rc=$?")
        body, _, rc = out.rpartition("__rc=")
        sys.stdout.write(body)
        rc_val = int(rc.strip() or 1)
        _say(f"{node_name}$ {command} -> exit {rc_val}")
        status = status or rc_val
    return status


def _stop_all(gentle: bool) -> None:
    from testbed.machine.state import ask_owners_to_stop, clean_all, recorded_runs

    try:
        if gentle and ask_owners_to_stop():  # each owner tears its own fabric down first
            deadline = time.monotonic() + 15
            while recorded_runs(report=lambda _line: None) and time.monotonic() < deadline:
                time.sleep(0.2)
        counts = clean_all(report=lambda line: _say(("skipped", "yellow"), " ", line))
    except UnsafePath as exc:
        _fail(str(exc), 1)
    console.print(f"removed {counts['runs']} run(s): {counts['processes']} processes, "
                  f"{counts['interfaces']} interfaces, {counts['files']} files")


@app.command()
def run(
    scenario: Annotated[Path, typer.Argument(help="Scenario YAML file (see scenarios/).")],
    results: Annotated[Path, typer.Option(help="Where results folders are written.")] = Path(
        "results"),
    out: Annotated[Path | None, typer.Option(
        help="The run's results folder (default: <results>/<name>-<time>); new or empty.")] = None,
    capture: Annotated[list[str] | None, typer.Option(
        help="Capture a host's NIC (h1) or a switch port (leaf1:2) into captures/*.pcap, "
             "besides the scenario's own `capture` list; repeatable.")] = None,
    strict: Annotated[bool, typer.Option(
        help="Refuse to run when the load is over this machine's budget, or the budget is "
             "unknown (no `testbed calibrate`).")] = False,
) -> None:
    """Run a scenario: fabric, QoS, watchdog, flows and faults on a timeline; write results."""
    from testbed.run.capture import CaptureError, target_problem
    from testbed.run.scenario import load_scenario
    from testbed.run.scenario_run import run_scenario

    try:
        sc = load_scenario(scenario)
    except ConfigError as exc:
        _fail(exc.render())
    for target in capture or []:
        problem = target_problem(target, sc.topo)
        if problem is not None:
            _fail(f"--capture {target}: {problem}")
        sc.extras.capture.append(target)
    if out is not None:
        from testbed.run.lifecycle import out_problem

        if problem := out_problem(out):
            _fail(problem)
    verdict = budget_or_exit(sc, strict)
    if os.geteuid() != 0:
        _fail("the testbed needs root for namespaces and veths: run it with sudo")
    from testbed.run.lifecycle import interrupt_on_sigterm

    interrupt_on_sigterm()
    from testbed.cli.progress import RunProgress
    from testbed.control.p4runtime import ControlPlaneError
    from testbed.fabric.bmv2 import SwitchStartError
    from testbed.fabric.network import FabricError
    from testbed.run.scenario_run import RunFailed

    try:
        with for_sudo_user(out or results), RunProgress(console) as live:
            res = run_scenario(sc, results, progress=_progress, status=live.callback,
                               run_dir=out, verdict=verdict)
    except (SwitchStartError, ControlPlaneError, FabricError, CaptureError, RunFailed,
            UnsafePath) as exc:
        _fail(str(exc), 1)
    except KeyboardInterrupt:
        console.print("interrupted: the fabric was torn down; partial results were kept")
        raise typer.Exit(130) from None
    print_run(res.results_dir, res.summary)


@app.command()
def sweep(
    scenario: Annotated[list[Path], typer.Argument(help="Scenario YAML file(s): see scenarios/.")],
    set_: Annotated[list[str] | None, typer.Option(
        "--set", help="KEY=V1,V2,...: a dotted path into the scenario and the values to run "
                      "(YAML), e.g. qos.pfc_enable=[3],[] ; repeatable: every combination runs."
    )] = None,
    repeat: Annotated[int, typer.Option(help="Runs of each point.")] = 1,
    out: Annotated[Path | None, typer.Option(
        help="The sweep's folder (default: results/sweep-<name>-<time>).")] = None,
    results: Annotated[Path, typer.Option(help="Where the default folder is made.")] = Path(
        "results"),
) -> None:
    """Run scenarios over a grid of settings; write every run and a table of their figures."""
    from testbed.cli.experiments import ExperimentError, sweep_main

    try:
        code = sweep_main(scenario, set_ or [], repeat, out, results, _progress, console)
    except ExperimentError as exc:
        _fail(str(exc), exc.code)
    raise typer.Exit(code)


@app.command()
def compare(
    runs: Annotated[list[Path], typer.Argument(help="Results folders of runs, or sweeps.")],
    out: Annotated[Path | None, typer.Option(
        help="Also write compare.md, compare.csv and compare.png here.")] = None,
) -> None:
    """Put runs' headline figures side by side (and, with --out, their time series)."""
    from testbed.cli.experiments import ExperimentError, compare_main

    try:
        code = compare_main(runs, out, console)
    except ExperimentError as exc:
        _fail(str(exc), exc.code)
    raise typer.Exit(code)


@app.command()
def report(
    run_dir: Annotated[Path, typer.Argument(help="A results folder.")],
    html: Annotated[bool, typer.Option(
        help="Also write report.html: one self-contained page, opened from disk.")] = False,
) -> None:
    """(Re)draw a results folder's report.png and report.md (and report.html with --html)."""
    from testbed.report.png import make_report

    if not run_dir.is_dir():
        _fail(f"no results folder at {run_dir}")
    _say(f"wrote {make_report(run_dir)}")
    if html:
        from testbed.report.html import write_html_report

        _say(f"wrote {write_html_report(run_dir)}")


@app.command()
def down() -> None:
    """Stop every running fabric and remove what it created."""
    _stop_all(gentle=True)


@app.command()
def clean() -> None:
    """Remove what a crashed or killed run left behind (only what the testbed recorded)."""
    _stop_all(gentle=False)


@app.command()
def doctor() -> None:
    """List what this machine lacks for the testbed, and how to get it."""
    from testbed.cli.doctor import run_checks

    checks = run_checks()
    table = Table(title="roce-testbed doctor")
    for col in ("check", "status", "detail", "how to fix"):
        table.add_column(col)
    missing = 0
    for c in checks:
        status = "[green]ok[/green]" if c.ok else (
            "[red]missing[/red]" if c.required else "[yellow]optional[/yellow]")
        missing += int(not c.ok and c.required)
        table.add_row(Text(c.name), status, Text(c.detail), Text(c.fix))
    Console().print(table)
    raise typer.Exit(1 if missing else 0)


app.command()(calibrate)


@app.command()
def provision(
    check: Annotated[bool, typer.Option(help="Dry run: report what would change.")] = False,
    tags: Annotated[str | None, typer.Option(help="Only these roles/tags (comma list).")] = None,
    skip_tags: Annotated[str | None, typer.Option(
        help="Skip these tags, e.g. p4repo where the p4lang repository is unreachable.")] = None,
    expect_no_changes: Annotated[bool, typer.Option(
        help="Fail if any task changed something (an idempotence check).")] = False,
    playbook: Annotated[Path | None, typer.Option(
        help="Another playbook to run instead of playbooks/site.yml.")] = None,
    toolchain_archive: Annotated[Path | None, typer.Option(
        help="Install BMv2, PI and p4c from this prebuilt .tar.zst instead of the p4lang "
             "repository (machines without internet).")] = None,
    bmv2_fast_archive: Annotated[Path | None, typer.Option(
        help="Also install BMv2's fast build (no logging, -O3) from this .tar.zst.")] = None,
    bmv2_fast_url: Annotated[str | None, typer.Option(
        help="Or download that archive from this URL (needs --bmv2-fast-sha256).")] = None,
    bmv2_fast_sha256: Annotated[str | None, typer.Option(
        help="The sha256 the download must have (sha256sum prints it).")] = None,
    bmv2_fast_source: Annotated[Path | None, typer.Option(
        help="Or build it from this behavioral-model source checkout (about half an hour).")]
        = None,
    bmv2_fast_build: Annotated[bool, typer.Option(
        help="With none of these, build it from the pinned behavioral-model commit from GitHub "
             "(tag p4repo; about half an hour on two cores, once).")] = True,
) -> None:
    """Provision this machine with playbooks/site.yml (through ansible-runner)."""
    from testbed.cli.provision import PLAYBOOK, playbook_vars, run_playbook

    book = (playbook or PLAYBOOK).resolve()
    if not book.is_file():
        _fail(f"--playbook: no such file {book}")
    try:
        extravars = playbook_vars(toolchain_archive, bmv2_fast_archive, bmv2_fast_source,
                                  bmv2_fast_url, bmv2_fast_sha256, bmv2_fast_build)
    except ValueError as exc:
        _fail(str(exc))
    if os.geteuid() != 0:
        _fail("provisioning installs packages: run it with sudo")
    colors = {"ok": "green", "changed": "yellow", "failed": "red", "skipped": "dim",
              "unreachable": "red", "ignored": "dim"}

    def show(task: str, outcome: str, note: str) -> None:
        _say((f"{outcome:>8}", colors[outcome]), f"  {task}")
        for line in note.splitlines():
            _say(f"{'':>8}  {line}")

    try:
        res = run_playbook(book, check=check, tags=tags, skip_tags=skip_tags,
                           extravars=extravars, on_task=show)
    except RuntimeError as exc:
        _fail(str(exc), 1)
    _say(("summary", "bold"), f": {res.summary()}")
    if not res.success:
        raise typer.Exit(1)
    if expect_no_changes and res.changed:
        _say(("not idempotent", "red"), ": changed tasks: " + ", ".join(res.changed_tasks))
        raise typer.Exit(1)


image_app = typer.Typer(help="Build or run the Docker image (for machines without a hypervisor).")
app.add_typer(image_app, name="image")
app.add_typer(lab_app, name="lab")
app.command("conformance")(conformance)


@image_app.command("build")
def image_build(tag: str = "roce-testbed:latest") -> None:
    """Build the image from the Dockerfile (set up by setup.sh, as the Vagrant lab is)."""
    from testbed.cli.image import RUN_HINT, ImageError, build

    try:
        build(tag, log=lambda s: console.print(s, markup=False, highlight=False))
    except ImageError as exc:
        _fail(str(exc), 1)
    _say(f"built {tag}; run it with:\n  {RUN_HINT.format(tag=tag)}")


@image_app.command("run")
def image_run(command: Annotated[list[str] | None, typer.Argument()] = None,
              tag: str = "roce-testbed:latest") -> None:
    """Run a command in a privileged container, e.g. `testbed image run -- testbed up --pingall`."""
    from testbed.cli.image import ImageError, run

    try:
        code = run(command or ["testbed", "up", "--pingall"], tag,
                   log=lambda s: console.print(s, markup=False, highlight=False))
    except ImageError as exc:
        _fail(str(exc), 1)
    raise typer.Exit(code)


@app.command()
def topology(
    config: Annotated[Path | None, typer.Argument(help="Fabric YAML file.")] = None,
    spines: int | None = None, leaves: int | None = None,
    hosts_per_leaf: int | None = None, parallel_links: int | None = None,
) -> None:
    """Print the resolved topology (nodes, ports, addresses, routes) as JSON; needs no root."""
    from testbed.topology.graph import build_topology

    cfg = _config_or_exit(config, spines=spines, leaves=leaves, hosts_per_leaf=hosts_per_leaf,
                          parallel_links=parallel_links)
    print(build_topology(cfg).to_json())


def main() -> None:
    """The ``testbed`` command (pyproject's entry point): the app, then a quick exit
    (:mod:`testbed.cli.quick_exit` says why)."""
    from testbed.cli.quick_exit import leave

    code: int | str | None = 0
    try:
        app()
    except SystemExit as exc:
        code = exc.code
    leave(code)


if __name__ == "__main__":  # pragma: no cover
    main()

