"""Which routing modules the opt-in compiled build turns into C extensions, and why the rest stay
Python.

``MERIDIAN_COMPILE=1 pip install .`` (``setup.py``) compiles ``COMPILED`` with mypyc, the
compiler of the mypy the project already type-checks with. The code is the same either way: a
compiled module is its ``.py`` file turned into C, with its annotations checked at run time. A
plain install is pure Python, and so is every test run from the checkout unless its ``.so`` files
were built in place (``make compiled-test``).

Every module of the package is in one of the two tables (``tests/routing/test_compiled_modules.py``),
so a new module is a decision, not an accident.
"""

from __future__ import annotations

# The decision's hot path and what it calls: profile, predictor rows, learning, pickers.
COMPILED: tuple[str, ...] = (
    "routing.answer_score",
    "routing.arrivals",
    "routing.awaiting",
    "routing.cost",
    "routing.deadline",
    "routing.errors",
    "routing.exploration",
    "routing.fleet_view",
    "routing.inflight",
    "routing.keep_warm",
    "routing.learned_columns",
    "routing.learner",
    "routing.learner_samples",
    "routing.learner_state",
    "routing.learning_decay",
    "routing.load",
    "routing.offset_learning",
    "routing.pipeline.candidates",
    "routing.pipeline.filters",
    "routing.pipeline.pickers",
    "routing.pipeline.router",
    "routing.policies.fused_ttft",
    "routing.policies.round_robin",
    "routing.predictor",
    "routing.predictor_detail",
    "routing.predictor_params",
    "routing.predictor_rows",
    "routing.predictor_scalar",
    "routing.prefilling",
    "routing.prefix_index",
    "routing.prewarm",
    "routing.price",
    "routing.profile",
    "routing.quick_init",
    "routing.rate_learning",
    "routing.reservation",
    "routing.row_inputs",
    "routing.scale_log",
    "routing.step_clock",
)

_PROTOCOLS = "runtime-checkable Protocols (mypyc cannot compile isinstance checks against them)"
_PYDANTIC = "pydantic models (a metaclass mypyc does not support)"

# Module -> why it stays Python.
INTERPRETED: dict[str, str] = {
    "routing.__init__": "a package marker",
    "routing.compiled_modules": "this table, read by setup.py before anything is built",
    "routing.pipeline.__init__": "a package marker",
    "routing.policies.__init__": "the policy registry: pydantic parameter models",
    "routing.types": _PROTOCOLS,
    "routing.pipeline.scoring": _PROTOCOLS,
    "routing.pipeline.lazy_candidate": "subclasses a slotted class of an interpreted module",
    "routing.prefix": "slower compiled: xxh3's 64-bit results are boxed on every call (1.17x)",
    "routing.policies.predicted_ttft": "SloCostScorer, an interpreted class, subclasses its scorer",
    "routing.policies.cache_aware": _PYDANTIC,
    "routing.policies.latency_ewma": _PYDANTIC,
    "routing.policies.least_loaded": "a baseline policy, off the default path",
    "routing.policies.llm_d": _PYDANTIC,
    "routing.policies.nearest_region": _PYDANTIC,
    "routing.policies.oracle": "a simulator-only policy",
    "routing.peer_learning": "peers' samples, re-expressed in the state feeder's turns, off the decision",
    "routing.policies.params": _PYDANTIC,
    "routing.policies.predicted_ttft_params": _PYDANTIC,
    "routing.policies.prefix_memory": "a baseline policy, off the default path",
    "routing.policies.random_choice": "a baseline policy, off the default path",
    "routing.policies.scalar_ttft": _PROTOCOLS,
    "routing.policies.slo_cost": _PYDANTIC,
}
