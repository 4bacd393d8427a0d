"""roce-testbed: an emulated lossless-Ethernet lab."""

import sys as _sys


def _prefer_stdlib_distutils() -> None:
    """Mininet's ``node.py`` imports ``distutils.version``. In a virtualenv, setuptools' shim
    (its ``distutils-precedence.pth``) answers that import with setuptools' own copy and
    imports all of setuptools and pkg_resources on the way: 0.25 s of every command that brings
    a fabric up, a twelfth of ``testbed up --pingall``. Where the standard library still has
    distutils (Python 3.11; Debian's python3-distutils), the shim leaves the import path, as
    ``SETUPTOOLS_USE_DISTUTILS=stdlib`` would have at start-up; on Python 3.12 it stays."""
    finder = next((f for f in _sys.meta_path if type(f).__name__ == "DistutilsMetaFinder"),
                  None)
    if finder is None or "distutils" in _sys.modules:
        return
    import importlib.machinery
    import warnings

    if importlib.machinery.PathFinder.find_spec("distutils") is None:
        return
    _sys.meta_path.remove(finder)
    warnings.filterwarnings("ignore", "The distutils package is deprecated", DeprecationWarning)


_prefer_stdlib_distutils()
