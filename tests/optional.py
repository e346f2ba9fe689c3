"""Optional dependencies: a test that needs one skips, with the reason, when it cannot be used.

`pytest.importorskip` skips only on ImportError. An optional package can fail in other ways
when it is imported on a machine that lacks a system library: `import metaworld` imports
MuJoCo and PyOpenGL, and without Debian's libosmesa6 PyOpenGL raises AttributeError. Any
exception raised by the import is a skip here, named in the reason, never a collection error.
"""

from __future__ import annotations

import importlib
from types import ModuleType

import pytest


def importorskip(name: str) -> ModuleType:
    """Import `name`, or skip the calling test (or module, at module level) saying why."""
    try:
        return importlib.import_module(name)
    except Exception as error:
        reason = f"{name} cannot be imported ({type(error).__name__}: {error})"
        pytest.skip(" ".join(reason.split())[:300], allow_module_level=True)
