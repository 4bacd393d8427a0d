"""Where this machine's calibration profile lives, and the checks that keep it trustworthy.

The testbed runs as root on shared machines, and a run chooses its link rate from the profile:
a profile another user could write would let them choose it. So the profile lives where only
root writes (``/var/lib/roce-testbed/calibration.json``: the folder 0755, the file 0644, both
owned by root), and a folder or file that another user owns, that group or others may write, or
that is a symbolic link is refused, on reading as on writing (open(2)'s O_NOFOLLOW; the checks
are made on the opened descriptor, so the file checked is the file read).

``ROCE_TESTBED_CALIBRATION`` names another file (tests, or a profile kept elsewhere); the same
checks apply to it, the owner being root or the user running the testbed.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from pydantic import ValidationError

from testbed.budget.cores import PROFILE_VERSION, Profile

DEFAULT_PATH = Path("/var/lib/roce-testbed/calibration.json")
ENV = "ROCE_TESTBED_CALIBRATION"
DIR_MODE, FILE_MODE = 0o755, 0o644


class ProfileError(Exception):
    """A profile that cannot be trusted or read: one line naming the path and the fix."""


class StaleProfile(ProfileError):
    """A profile of another version: calibrating again replaces it (its other builds too)."""


def profile_path() -> Path:
    return Path(os.environ.get(ENV) or DEFAULT_PATH)


def _owners() -> set[int]:
    return {0, os.geteuid()}


def _check(st: os.stat_result, path: Path, what: str) -> None:
    """Refuse what another user owns or what group or others may write."""
    if st.st_uid not in _owners():
        raise ProfileError(f"{path}: the {what} belongs to uid {st.st_uid}, not root: another "
                           f"user could choose this machine's link rates; remove it and run "
                           f"`sudo testbed calibrate`")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise ProfileError(f"{path}: the {what} is writable by group or others (mode "
                           f"{stat.S_IMODE(st.st_mode):o}); `chmod go-w {path}` or remove it "
                           f"and calibrate again")


def _check_dir(folder: Path) -> None:
    st = os.lstat(folder)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise ProfileError(f"{folder}: not a plain folder (a symbolic link or a file); remove "
                           f"it and run `sudo testbed calibrate`")
    _check(st, folder, "folder")


def read_profile(path: Path | None = None) -> Profile | None:
    """The profile at ``path`` (default: :func:`profile_path`), or None if there is none.
    ProfileError if it is there but not to be trusted, or not readable as a profile."""
    path = path or profile_path()
    try:
        _check_dir(path.parent)
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    except OSError as exc:  # ELOOP: the file is a symbolic link
        raise ProfileError(f"{path}: cannot be opened safely ({exc.strerror}); remove it and "
                           f"run `sudo testbed calibrate`") from None
    with os.fdopen(fd) as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise ProfileError(f"{path}: not a regular file; remove it and calibrate again")
        _check(st, path, "file")
        text = f.read()
    try:
        data = json.loads(text)
        if data.get("version") != PROFILE_VERSION:
            raise StaleProfile(f"{path}: a profile of version {data.get('version')}, this "
                               f"testbed reads version {PROFILE_VERSION}: run `sudo testbed "
                               f"calibrate` again")
        return Profile.model_validate(data)
    except (ValueError, AttributeError, ValidationError) as exc:
        if isinstance(exc, ProfileError):
            raise
        raise ProfileError(f"{path}: not a calibration profile; run `sudo testbed calibrate` "
                           f"again") from None


def write_profile(profile: Profile, path: Path | None = None) -> Path:
    """Write ``profile`` (mode 0644, its folder 0755, created if missing), replacing the file
    whole so that a reader never sees half of it. ProfileError if the folder or an existing
    file fails the checks."""
    path = path or profile_path()
    folder = path.parent
    if not folder.exists() and not folder.is_symlink():
        folder.mkdir(mode=DIR_MODE, parents=True)
        os.chmod(folder, DIR_MODE)  # mkdir's mode is masked by the umask
    _check_dir(folder)
    if path.is_symlink():
        raise ProfileError(f"{path}: a symbolic link; remove it and calibrate again")
    if path.exists():
        _check(os.lstat(path), path, "file")
    tmp = folder / f".{path.name}.{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, FILE_MODE)
    try:
        with os.fdopen(fd, "w") as f:
            os.fchmod(f.fileno(), FILE_MODE)
            f.write(json.dumps(profile.model_dump(mode="json"), indent=2) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


def load_profile() -> tuple[Profile | None, str]:
    """The profile for a run, and why there is none: never raises (a profile that cannot be
    trusted is no profile, and the reason says so)."""
    try:
        p = read_profile()
    except ProfileError as exc:
        return None, str(exc)
    return p, "" if p else f"no calibration profile at {profile_path()}"
