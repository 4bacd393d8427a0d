"""Folders and files root may use on a machine other users share: checked before use, so that
nothing another local user can write (a folder made first, a symbolic link, a file put in its
place) steers what root creates, reads, kills or deletes (docs/THREAT_MODEL.md).

The rule is CERT's FIO15-C, "Ensure that file operations are performed in a secure directory"
(https://wiki.sei.cmu.edu/confluence/display/c/FIO15-C.+Ensure+that+file+operations+are+performed+in+a+secure+directory):
every folder from ``/`` down belongs to root (or to the user running) and no one else can
write in it, except a sticky one such as ``/tmp``, where no one can rename or delete what is
not theirs (sticky bit, https://man7.org/linux/man-pages/man1/chmod.1.html). Inside such a
folder, files are created with O_EXCL and O_NOFOLLOW (open(2),
https://man7.org/linux/man-pages/man2/open.2.html) and read only once their owner and mode
are checked on the open file itself.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

#: Bits that let a group or other users write.
_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH


class UnsafePath(Exception):
    """A path root must not use; the message is one line that names it and what to do."""


def _trusted(uid: int) -> bool:
    return uid in (0, os.geteuid())


def _user(uid: int) -> str:
    import pwd

    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def folder_problem(path: Path, st: os.stat_result, *, private: bool) -> str | None:
    """What makes a folder unsafe, from its lstat: a symbolic link, not a folder, another
    owner, or a mode others can write (``private``: any access by others at all)."""
    if stat.S_ISLNK(st.st_mode):
        return f"{path} is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return f"{path} is not a folder"
    if not _trusted(st.st_uid) or (private and st.st_uid != os.geteuid()):
        return f"{path} belongs to {_user(st.st_uid)}"
    mode = stat.S_IMODE(st.st_mode)
    if private and mode & 0o077:
        return f"{path} has mode {mode:04o}, which lets other users in (it must be 0700)"
    if not private and mode & _OTHERS_WRITE and not mode & stat.S_ISVTX:
        return f"{path} has mode {mode:04o}, which lets other users write in it"
    return None


def check_ancestors(path: Path) -> None:
    """Every folder above ``path``, from ``/`` down, is one only root (or we) can change."""
    for parent in reversed(Path(os.path.abspath(path)).parents):
        try:
            st = os.lstat(parent)
        except FileNotFoundError:
            return  # made below by secure_dir, each with the same checks
        problem = folder_problem(parent, st, private=False)
        if problem:
            raise UnsafePath(f"{problem}: refusing to use {path} below it")


def secure_dir(path: Path, *, parents: bool = False) -> Path:
    """``path`` as a folder of mode 0700 owned by the user running, created if missing
    (``parents``: its missing parents too, each 0700); an existing one of another owner, a
    mode others can enter, or a symbolic link anywhere on the way is refused, not repaired."""
    path = Path(os.path.abspath(path))
    check_ancestors(path)
    if parents and not path.parent.exists():
        secure_dir(path.parent, parents=True)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise UnsafePath(f"cannot create {path}: {exc.strerror}") from None
    st = os.lstat(path)
    if st.st_uid == 0 != os.geteuid() and not stat.S_ISLNK(st.st_mode):
        raise UnsafePath(f"{path} is root's: run the testbed with sudo")
    problem = folder_problem(path, st, private=True)
    if problem:
        raise UnsafePath(f"{problem}: refusing to use it; remove it (sudo rm -r {path}) "
                         "and run again")
    return path


def file_problem(path: Path, st: os.stat_result) -> str | None:
    """What makes a file unsafe to read or act on, from its (f)stat: not a regular file,
    another owner, or a mode others can write."""
    if not stat.S_ISREG(st.st_mode):
        return f"{path} is not a regular file"
    if st.st_uid != os.geteuid():
        return f"{path} belongs to {_user(st.st_uid)}"
    if st.st_mode & _OTHERS_WRITE:
        return f"{path} has mode {stat.S_IMODE(st.st_mode):04o}, which lets other users write it"
    return None


def read_own(path: Path) -> str:
    """The text of a file we wrote: opened without following a symbolic link, then its owner
    and mode checked on the open file (what is read is what was checked)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        raise UnsafePath(f"cannot open {path}: {exc.strerror}") from None
    with os.fdopen(fd, "r") as fh:
        problem = file_problem(path, os.fstat(fd))
        if problem:
            raise UnsafePath(f"{problem}: not reading it")
        return fh.read()


def write_new(path: Path, text: str, mode: int = 0o600) -> None:
    """Write ``path`` afresh: whatever was there (a file, a link) is removed, then the file
    is created with O_EXCL and O_NOFOLLOW, so that nothing put there first is written
    through."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)


def open_lock(path: Path) -> int:
    """A lock file's descriptor, in a folder that passes :func:`check_ancestors`: created
    0600 or opened without following a link, and refused unless it is ours and only ours to
    write (another user's file could be held by them forever)."""
    check_ancestors(path)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise UnsafePath(f"cannot open the lock {path}: {exc.strerror}") from None
    problem = file_problem(path, os.fstat(fd))
    if problem:
        os.close(fd)
        raise UnsafePath(f"{problem}: refusing it as the fabric lock")
    return fd
