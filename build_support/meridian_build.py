"""In-tree PEP 517 backend: setuptools, plus mypy as a build requirement when
``MERIDIAN_COMPILE=1`` asks for the compiled routing modules (``setup.py``)."""

from __future__ import annotations

import os
from typing import Any

from setuptools import build_meta as _setuptools

# The hooks this backend does not change.
build_wheel = _setuptools.build_wheel
build_sdist = _setuptools.build_sdist
build_editable = _setuptools.build_editable
get_requires_for_build_sdist = _setuptools.get_requires_for_build_sdist
prepare_metadata_for_build_wheel = _setuptools.prepare_metadata_for_build_wheel
prepare_metadata_for_build_editable = _setuptools.prepare_metadata_for_build_editable

# The mypy the compiled build was measured and tested with (``make compiled-test``).
_COMPILER = "mypy>=2.4"


def _compiling() -> bool:
    return os.environ.get("MERIDIAN_COMPILE", "") == "1"


# setuptools finds extra requirements by running setup.py, which needs mypy to compile: so a
# compiled build names mypy without running it (setup.py declares no setup_requires).
def get_requires_for_build_wheel(config_settings: dict[str, Any] | None = None) -> list[str]:
    if _compiling():
        return [_COMPILER]
    return _setuptools.get_requires_for_build_wheel(config_settings)


def get_requires_for_build_editable(config_settings: dict[str, Any] | None = None) -> list[str]:
    if _compiling():
        return [_COMPILER]
    return _setuptools.get_requires_for_build_editable(config_settings)
