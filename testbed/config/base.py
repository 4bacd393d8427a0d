"""What every config model shares: the error that names each mistake, the strict base model,
and how a rule across fields reports each problem at the field it names (testbed.config.models)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError


class ConfigError(Exception):
    """A configuration that cannot be used; ``problems`` holds one readable line per mistake."""

    def __init__(self, problems: list[str], source: str = "config") -> None:
        self.problems = problems
        self.source = source
        super().__init__(f"{source}: " + "; ".join(problems))

    def render(self) -> str:
        lines = [f"{self.source} has {len(self.problems)} problem(s):"]
        lines += [f"  - {p}" for p in self.problems]
        return "\n".join(lines)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


def _refuse(model: str, errors: list[tuple[tuple[str | int, ...], str, Any]]) -> None:
    """Raise the problems a rule across fields found, each at the field it names.

    A model validator's ValueError is reported at the model itself; a ValidationError raised
    from it keeps its locations (relative to the model), so the message can name e.g.
    ``qos.pfc_enable`` rather than ``qos``. ``errors`` holds (location, message, input)."""
    raise ValidationError.from_exception_data(model, [
        InitErrorDetails(type=PydanticCustomError("rule", "{msg}", {"msg": msg}), loc=loc,
                         input=value)
        for loc, msg, value in errors])
