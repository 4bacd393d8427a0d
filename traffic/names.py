"""The one pattern every name from a file must match before it reaches a command line or a
path: a fabric's name (its results folder, its runtime folder), hosts and switches a scenario
names (flows, faults, routes, captures, watchdog ports), flow names, a lab's scenario names.

A name that matches holds no quote, space, newline, ``;``, ``$``, ``/`` or ``..``: it cannot
end a shell word or climb out of a folder, whatever it is spliced into (docs/THREAT_MODEL.md).
It is the pattern fabric names always had; the shipped scenarios' and labs' names all match.
"""

from __future__ import annotations

import re

#: A name: a lowercase letter, then up to 23 lowercase letters, digits and dashes.
NAME = r"[a-z][a-z0-9-]{0,23}"
#: The same, as a whole string (pydantic's ``Field(pattern=...)``).
NAME_PATTERN = rf"^{NAME}$"
#: A switch port or capture target written ``node:port`` (leaf1:3).
PORT_PATTERN = rf"^{NAME}:[0-9]{{1,3}}$"
#: A file a lab hands out (``lab.yaml``'s ``files``): a name, then ``.yaml``.
FILE_PATTERN = rf"^{NAME}\.yaml$"

_NAME = re.compile(NAME_PATTERN)


def is_name(text: object) -> bool:
    """Whether ``text`` is a string that matches :data:`NAME_PATTERN`."""
    return isinstance(text, str) and _NAME.fullmatch(text) is not None


def name_problem(field: str, text: object) -> str | None:
    """One line naming ``field`` when ``text`` is not a name, else None."""
    if is_name(text):
        return None
    return (f"{field}: {text!r} is not a name: use a lowercase letter, then up to 23 lowercase "
            "letters, digits and dashes")
