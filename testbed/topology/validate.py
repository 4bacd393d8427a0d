"""From YAML or data to a :class:`FabricConfig`, or a :class:`ConfigError` naming every mistake.

:mod:`testbed.config.models` holds the models: each field, and the rules among fields. What needs
more is checked here, before anything starts: the thresholds derived from the link rates and the MTU
(:func:`testbed.topology.qos.check_qos`) and the names that must exist in the built topology (the
PFC
watchdog's ports). Importing both from here is what keeps :mod:`testbed.config.models` free of them:
qos and topology import config, never the other way round.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from testbed.config.models import ConfigError, FabricConfig
from testbed.topology.graph import Topology, build_topology
from testbed.topology.qos import check_qos


def _field_names(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """The allowed field names at ``loc`` (the parent of an unknown key), for the error text."""
    current: Any = model
    for part in loc:
        field = getattr(current, "model_fields", {}).get(part)
        if field is None:
            return []
        current = field.annotation
    return sorted(getattr(current, "model_fields", {}).keys())


def explain(model: type[BaseModel], err: ValidationError) -> list[str]:
    """One line per pydantic error: the field's dotted path, then what is wrong."""
    problems = []
    for e in err.errors():
        loc = tuple(p for p in e["loc"])
        where = ".".join(str(p) for p in loc) or "(top level)"
        if e["type"] == "extra_forbidden":
            allowed = _field_names(model, loc[:-1])
            problems.append(
                f"{where}: unknown field; allowed here: {', '.join(allowed)}"
                if allowed
                else f"{where}: unknown field"
            )
            continue
        msg = e["msg"].removeprefix("Value error, ")
        given = e.get("input")
        if e["type"] not in ("missing",) and not isinstance(given, dict | BaseModel):
            msg = f"{msg} (got {given!r})"
        problems.append(f"{where}: {msg}")
    return problems


def parse_fields(data: Any, source: str = "config") -> FabricConfig:
    """Validate already-loaded data, each field and the rules among fields; raise ConfigError
    with one line per problem. :func:`parse_config` checks the rest."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(
            [f"the top level must be a mapping of sections "
             f"({', '.join(FabricConfig.model_fields)}), not a {type(data).__name__}"],
            source,
        )
    shape = data.get("fabric")
    autos = [k for k in ("host_link_mbps", "fabric_link_mbps")
             if isinstance(shape, dict) and shape.get(k) == "auto"]
    if autos:  # testbed.budget.scenario resolves it, from a scenario's flows
        raise ConfigError([f"fabric.{k}: auto is chosen from a scenario's flows (testbed run "
                           "SCENARIO.yaml); a fabric alone needs a rate in Mbit/s"
                           for k in autos], source)
    try:
        return FabricConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(explain(FabricConfig, err), source) from None


def read_yaml(path: str | Path, what: str = "fabric") -> Any:
    """The data of a YAML file; ConfigError naming the file (and line) if it cannot be read."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError([f"no such file; give the path of a {what} YAML file"], str(p))
    try:
        return yaml.safe_load(p.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError([f"{where}not valid YAML ({problem})"], str(p)) from None


def _switches_and_ports(topo: Topology) -> str:
    """The names a watchdog port may use in this fabric, for an error message."""
    parts = []
    for group in (topo.spines, topo.leaves):
        if group:
            first, last = group[0], group[-1]
            names = first.name if first is last else f"{first.name}..{last.name}"
            parts.append(f"{names} (ports 1..{max(first.ports)})")
    return ", ".join(parts)


def watchdog_port_problems(cfg: FabricConfig, topo: Topology) -> list[str]:
    """agent.pfc_watchdog.ports against the topology: a name that matches nothing would leave
    the port it meant unwatched, without a word."""
    ports = cfg.agent.pfc_watchdog.ports
    if ports == "all":
        return []
    problems = []
    valid = _switches_and_ports(topo)
    example = f"{topo.leaves[0].name}:{max(topo.leaves[0].ports)}"
    for i, name in enumerate(ports):
        sw_name, _, port = name.partition(":")
        try:
            sw = topo.switch(sw_name)
        except KeyError:
            problems.append(f"agent.pfc_watchdog.ports.{i}: no switch {sw_name!r} in this "
                            f"fabric; switches are {valid}; e.g. {example}")
            continue
        if int(port) not in sw.ports:
            problems.append(f"agent.pfc_watchdog.ports.{i}: {sw_name} has no port {int(port)}; "
                            f"its ports are 1..{max(sw.ports)}; e.g. {sw_name}:1")
    return problems


def parse_config(data: Any, source: str = "config") -> FabricConfig:
    """A config that every part of the testbed can obey, or ConfigError with one line per
    problem: the fields (:func:`parse_fields`), then what derives from them."""
    cfg = parse_fields(data, source)
    problems = check_qos(cfg) + watchdog_port_problems(cfg, build_topology(cfg))
    if problems:
        raise ConfigError(problems, source)
    return cfg


def load_config(path: str | Path) -> FabricConfig:
    """Read and check a fabric YAML file."""
    return parse_config(read_yaml(path, "fabric"), str(path))
