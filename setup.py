"""The build's one switch: ``MERIDIAN_COMPILE=1`` compiles the routing decision with mypyc.

Without it (the default) this is a plain setuptools build of pure-Python packages; everything
else is declared in ``pyproject.toml``. With it, the modules listed in
``routing/compiled_modules.py`` become C extensions beside their ``.py`` files, which Python
then imports first. ``build_support/meridian_build.py`` adds mypy to the build's requirements
only in that case, so ``MERIDIAN_COMPILE=1 pip install .`` works in an isolated build too.
"""

from __future__ import annotations

import os
import runpy
from pathlib import Path
from typing import Any

from setuptools import setup

HERE = Path(__file__).resolve().parent


def compiled_extensions() -> list[Any]:
    if os.environ.get("MERIDIAN_COMPILE", "") != "1":
        return []
    from mypyc.build import mypycify  # only needed, and only present, when compiling

    table = runpy.run_path(str(HERE / "routing" / "compiled_modules.py"))
    paths = [module.replace(".", "/") + ".py" for module in table["COMPILED"]]
    # -O3 (mypyc's default), no debug symbols; one named group module holds the shared runtime.
    return list(mypycify(paths, opt_level="3", debug_level="0", group_name="meridian_routing"))


setup(ext_modules=compiled_extensions())
