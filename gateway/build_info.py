"""What this process runs: the routing decision compiled (``MERIDIAN_COMPILE=1``) or as Python.

Reported by ``meridian --version`` and as the ``routing`` label of ``meridian_build_info``, so
an operator can see which build a fleet runs without reading its install logs.
"""

from __future__ import annotations

import importlib
import importlib.machinery
from collections.abc import Sequence

from routing.compiled_modules import COMPILED


def is_extension(module_name: str) -> bool:
    """Whether ``module_name`` was loaded from a C extension rather than a ``.py`` file."""
    path = getattr(importlib.import_module(module_name), "__file__", None) or ""
    return path.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))


def routing_build(modules: Sequence[str] = COMPILED) -> str:
    """``compiled``, ``interpreted``, or ``partial`` (some compiled modules missing: an in-place
    build of an older module list, or a hand-deleted ``.so``)."""
    compiled = sum(is_extension(name) for name in modules)
    if compiled == len(modules):
        return "compiled"
    return "interpreted" if compiled == 0 else "partial"
