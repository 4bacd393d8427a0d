"""Files a command writes under sudo belong to the user who ran sudo (SUDO_UID, SUDO_GID), not
to root: a results folder, a sweep, a comparison, a lab's working folder. Otherwise the user
could not delete, move or edit them without sudo again."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def sudo_owner() -> tuple[int, int] | None:
    """(uid, gid) of the user who ran sudo, when running as root under sudo; else None."""
    uid, gid = os.environ.get("SUDO_UID"), os.environ.get("SUDO_GID")
    if os.geteuid() == 0 and uid and gid and uid.isdigit() and gid.isdigit():
        return int(uid), int(gid)
    return None


def chown_tree(path: Path, owner: tuple[int, int]) -> None:
    """chown -R, without following symbolic links."""
    os.chown(path, *owner, follow_symlinks=False)
    if path.is_dir() and not path.is_symlink():
        for dirpath, dirnames, filenames in os.walk(path):
            for name in dirnames + filenames:
                os.chown(os.path.join(dirpath, name), *owner, follow_symlinks=False)


@contextmanager
def for_sudo_user(*folders: Path) -> Iterator[None]:
    """Whatever the block creates in ``folders`` (a folder it creates, or new entries in one
    that was there) is given to the sudo user when it ends, however it ends: an interrupted run
    keeps what it measured, and that too is the user's."""
    owner = sudo_owner()
    if owner is None:
        yield
        return
    before = {f: (set(os.listdir(f)) if f.is_dir() else None) for f in folders}
    try:
        yield
    finally:
        for f, had in before.items():
            if not f.exists():
                continue
            if had is None:
                chown_tree(f, owner)
            elif f.is_dir():
                for name in set(os.listdir(f)) - had:
                    if (f / name).lstat().st_uid == 0:  # ours, not another user's new file
                        chown_tree(f / name, owner)
