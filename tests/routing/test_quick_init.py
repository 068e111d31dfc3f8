"""``quick_init`` keeps a frozen dataclass's constructor exactly as dataclasses made it."""

from __future__ import annotations

import dataclasses
import inspect
import pickle
from typing import Any

import pytest

from routing.exploration import Exploration
from routing.pipeline.filters import FilterContext
from routing.pipeline.lazy_candidate import _Details
from routing.pipeline.scoring import ScoreContext, Scores
from routing.predictor import Prediction
from routing.quick_init import quick_init
from routing.types import Candidate, Decision, Rejection, RequestProfile

QUICK = (Prediction, Scores, ScoreContext, FilterContext, Exploration, _Details, RequestProfile,
         Candidate, Decision, Rejection)  # fmt: skip


def _twin(cls: type[Any]) -> type[Any]:
    """The same fields, through dataclasses' own __init__ only."""
    spec = [(f.name, f.type, f) for f in dataclasses.fields(cls)]
    return dataclasses.make_dataclass(cls.__name__, spec, frozen=True, slots=True)


@pytest.mark.parametrize("cls", QUICK, ids=lambda c: c.__name__)
def test_the_same_signature_defaults_and_fields_as_dataclasses_gives(cls: type[Any]) -> None:
    twin = _twin(cls)
    ours, theirs = inspect.signature(cls.__init__), inspect.signature(twin.__init__)
    assert [(p.name, p.kind) for p in ours.parameters.values()] == [
        (p.name, p.kind) for p in theirs.parameters.values()
    ]
    required = [f for f in dataclasses.fields(cls)
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]  # fmt: skip
    values = [f"v{i}" for i in range(len(required))]
    one, other = cls(*values), twin(*values)
    for f in dataclasses.fields(cls):
        assert getattr(one, f.name) == getattr(other, f.name)
    by_name = cls(**{f.name: v for f, v in zip(required, values, strict=True)})
    assert all(getattr(by_name, f.name) == getattr(one, f.name) for f in dataclasses.fields(cls))


def test_factories_run_per_instance_and_replace_pickle_eq_hash_hold() -> None:
    one, other = RequestProfile("m"), RequestProfile("m")
    assert "region_penalty_ms=<factory>" in str(inspect.signature(RequestProfile))
    assert one.region_penalty_ms == {} and one.region_penalty_ms is not other.region_penalty_ms
    assert one == other and hash(one) == hash(other)
    moved = dataclasses.replace(one, model="n", prompt_tokens=7)
    assert (moved.model, moved.prompt_tokens, moved.tenant) == ("n", 7, "default")
    assert pickle.loads(pickle.dumps(moved)) == moved
    with pytest.raises(dataclasses.FrozenInstanceError):
        moved.model = "x"  # type: ignore[misc]
    with pytest.raises(TypeError):
        RequestProfile()  # type: ignore[call-arg]


def test_what_it_does_not_reproduce_is_refused() -> None:
    @dataclasses.dataclass(frozen=True, slots=True)
    class Later:
        a: int

        def __post_init__(self) -> None:
            pass

    @dataclasses.dataclass(frozen=True, slots=True)
    class KeywordOnly:
        a: int = dataclasses.field(kw_only=True)

    @dataclasses.dataclass(frozen=True)
    class NoSlots:
        a: int

    @dataclasses.dataclass(frozen=True, slots=True)
    class Init:
        a: int
        b: dataclasses.InitVar[int]

    for cls in (Later, KeywordOnly, NoSlots, Init):
        with pytest.raises(TypeError):
            quick_init(cls)

    @quick_init
    @dataclasses.dataclass(frozen=True, slots=True)
    class Empty:
        pass

    assert Empty() == Empty()
