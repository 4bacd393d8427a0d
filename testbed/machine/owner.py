"""Files a command writes under sudo belong to the user who ran sudo (SUDO_UID, SUDO_GID), not
to root: a results folder, a sweep, a comparison, a lab's working folder. Otherwise the user
could not delete, move or edit them without sudo again.

Root writes there on behalf of that user, in folders other users may reach, so neither the
writing nor the handing over may be steered by them (docs/THREAT_MODEL.md): a results path
with another user's symbolic link on it, or below a folder others can write, is refused
before anything is created (:func:`make_results_dir`); and the change of owner never follows
a link and touches only what root itself created (:func:`for_sudo_user`).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from testbed.machine.safepath import UnsafePath


def sudo_owner() -> tuple[int, int] | None:
    """(uid, gid) of the user who ran sudo, when running as root under sudo; else None."""
    uid, gid = os.environ.get("SUDO_UID"), os.environ.get("SUDO_GID")
    if os.geteuid() == 0 and uid and gid and uid.isdigit() and gid.isdigit():
        return int(uid), int(gid)
    return None


def _trusted_uids() -> set[int]:
    """Root, the user running and the sudo user: whose links and folders a results path may
    go through."""
    owner = sudo_owner()
    return {0, os.geteuid()} | ({owner[0]} if owner else set())


def results_path_problem(path: Path) -> str | None:
    """Why root must not create or write ``path`` (None if it may): on the way there, a
    symbolic link or a folder of another user, or a folder others can write (they could swap
    what root made for a link while it runs). Both the path as written and where its links
    lead are checked."""
    trusted = _trusted_uids()
    absolute = Path(os.path.abspath(path))
    for p in {*absolute.parents, absolute, *Path(os.path.realpath(absolute)).parents}:
        try:
            st = os.lstat(p)
        except OSError:
            continue  # not there yet: made by make_results_dir
        mode = stat.S_IMODE(st.st_mode)
        if st.st_uid not in trusted:
            kind = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "a folder"
            return f"{p} is {kind} of another user (uid {st.st_uid})"
        if stat.S_ISDIR(st.st_mode) and mode & 0o022 and not mode & stat.S_ISVTX:
            return f"{p} has mode {mode:04o}: other users can write in it"
    return None


def make_results_dir(path: Path) -> Path:
    """``path`` (and its missing parents) as a folder for results, after
    :func:`results_path_problem` found nothing; UnsafePath names the problem otherwise."""
    problem = results_path_problem(path)
    if problem:
        raise UnsafePath(f"results folder {path}: {problem}; give a folder only you can write")
    path.mkdir(parents=True, exist_ok=True)
    return path


def _ours(st: os.stat_result) -> bool:
    """Created by this command: root's, and not a hard link to a file made elsewhere (a link
    a user made to a root file, where fs.protected_hardlinks is off:
    https://docs.kernel.org/admin-guide/sysctl/fs.html#protected-hardlinks)."""
    return st.st_uid == os.geteuid() and (stat.S_ISDIR(st.st_mode) or st.st_nlink == 1)


def chown_tree(path: Path, owner: tuple[int, int]) -> None:
    """chown -R of what this command created: no symbolic link followed (the link itself is
    changed), and nothing of another user's, nor a hard link, touched."""
    if not _ours(os.lstat(path)):
        return
    os.chown(path, *owner, follow_symlinks=False)
    if stat.S_ISLNK(os.lstat(path).st_mode) or not path.is_dir():
        return
    for dirpath, dirnames, filenames in os.walk(path):  # never descends into a link
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            if _ours(os.lstat(p)):
                os.chown(p, *owner, follow_symlinks=False)


def _real_dir(f: Path) -> bool:
    """A folder itself, not a link to one."""
    try:
        return stat.S_ISDIR(os.lstat(f).st_mode)
    except OSError:
        return False


@contextmanager
def for_sudo_user(*folders: Path) -> Iterator[None]:
    """Whatever the block creates in ``folders`` (a folder it creates, or new entries in one
    that was there) is given to the sudo user when it ends, however it ends: an interrupted run
    keeps what it measured, and that too is the user's."""
    owner = sudo_owner()
    if owner is None:
        yield
        return
    before = {f: (set(os.listdir(f)) if _real_dir(f) else None) for f in folders}
    try:
        yield
    finally:
        for f, had in before.items():
            if not os.path.lexists(f):
                continue
            if had is None:
                chown_tree(f, owner)
            elif _real_dir(f):
                for name in set(os.listdir(f)) - had:
                    chown_tree(f / name, owner)  # ours only, not another user's new file
