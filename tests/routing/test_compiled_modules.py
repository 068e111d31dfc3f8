"""The compiled build's module table covers the package, and a run is the build it says it is.

``make compiled-test`` runs the routing, simulator and gateway tests against extensions built
by ``MERIDIAN_COMPILE=1`` with ``MERIDIAN_EXPECT_COMPILED=1`` set; every other run is from
``.py`` files. Either way the check below must hold, so a compiled run that silently imported
Python (or a checkout with stray ``.so`` files) fails here.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import routing
from gateway.build_info import is_extension, routing_build
from routing.compiled_modules import COMPILED, INTERPRETED

PACKAGE = Path(routing.__file__).parent
EXPECT_COMPILED = os.environ.get("MERIDIAN_EXPECT_COMPILED", "") == "1"


def _modules() -> set[str]:
    return {
        ".".join(("routing", *path.relative_to(PACKAGE).with_suffix("").parts))
        for path in PACKAGE.rglob("*.py")
    }


def test_every_routing_module_is_either_compiled_or_kept_as_python_with_a_reason() -> None:
    assert not set(COMPILED) & set(INTERPRETED)
    assert set(COMPILED) | set(INTERPRETED) == _modules()
    assert all(reason.strip() for reason in INTERPRETED.values())
    assert list(COMPILED) == sorted(COMPILED)


def test_the_run_imports_the_build_it_expects() -> None:
    for name in COMPILED:
        assert is_extension(name) == EXPECT_COMPILED, name
    for name in INTERPRETED:
        importlib.import_module(name.removesuffix(".__init__"))
        assert not is_extension(name.removesuffix(".__init__")), name
    assert routing_build() == ("compiled" if EXPECT_COMPILED else "interpreted")


def test_a_build_with_only_some_modules_compiled_says_so() -> None:
    # orjson's core is a C extension and json's is Python: a mix reads as partial.
    assert routing_build(("orjson.orjson", "json.decoder")) == "partial"
    assert routing_build(("orjson.orjson",)) == "compiled"
    assert routing_build(("json.decoder",)) == "interpreted"
