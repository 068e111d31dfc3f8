"""A gateway process started through a probe file's ``_child`` (``call_census``,
``first_token_clock``): the probe arms its signal handlers, then runs ``meridian``; the parent
signals it and waits for the file the probe writes.

The probe is loaded by its file path, not imported by name, so a checkout without it (an older
commit under ``--src``) can be probed too: its gateway code comes from its ``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path

from loadtests.bench.overhead_setup import src_env

THIS_CHECKOUT = str(Path(__file__).resolve().parents[1])
_WRITE_TIMEOUT_S = 30.0


def launcher(probe_file: str, out: Path) -> list[str]:
    """The argv that runs ``meridian`` through ``probe_file``'s ``_child(out, argv)``."""
    child = (
        "import importlib.util, sys; "
        f"spec = importlib.util.spec_from_file_location('_probe', {probe_file!r}); "
        "module = sys.modules['_probe'] = importlib.util.module_from_spec(spec); "
        "spec.loader.exec_module(module); "
        "sys.exit(module._child(sys.argv[1], sys.argv[2:]))"
    )
    return [sys.executable, "-c", child, str(out)]


def gateway_env(env: dict[str, str] | None) -> dict[str, str]:
    """``env`` (another checkout's), or this checkout's code on the ``PYTHONPATH``."""
    return {**(env or {**os.environ, "PYTHONPATH": THIS_CHECKOUT})}


def _written_yet(out: Path) -> bool:
    return out.exists() and out.stat().st_size > 0


async def written(out: Path, what: str) -> None:
    """Until the probe has written ``out`` (``what`` names it in the error)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + _WRITE_TIMEOUT_S
    while not _written_yet(out):
        if loop.time() > deadline:
            raise SystemExit(f"the gateway did not write its {what}")
        await asyncio.sleep(0.05)


def checkouts(src_specs: list[str]) -> list[tuple[str, dict[str, str] | None]]:
    """This checkout (None: :func:`gateway_env`'s default), then each ``--src NAME=DIR``."""
    others = [spec.split("=", 1) for spec in src_specs]
    return [("this checkout", None)] + [(name, src_env(path)) for name, path in others]


def probe_parser(doc: str) -> argparse.ArgumentParser:
    """A tool's parser with the arguments every probed-gateway tool takes (``--src``,
    ``--out``); the tool adds its own."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--src", action="append", default=[], metavar="NAME=DIR")
    parser.add_argument("--out", default="loadtests/results")
    return parser
