"""``first_token_observer``: a router that learns at the first token is found by its class, once."""

from __future__ import annotations

from routing import types
from routing.types import FirstToken, first_token_observer


class _Learns:
    def __init__(self) -> None:
        self.seen: list[FirstToken] = []

    def observe_first_token(self, first: FirstToken) -> None:
        self.seen.append(first)


class _DoesNot:
    name = "plain"


def test_a_router_with_observe_first_token_is_returned_and_one_without_is_not() -> None:
    learns, plain = _Learns(), _DoesNot()
    assert first_token_observer(learns) is learns
    assert first_token_observer(plain) is None
    # Asked again, and for other instances of the same classes: the same answers, from the
    # per-class table rather than another walk of the Protocol.
    assert types._OBSERVES_FIRST_TOKENS[_Learns] is True
    assert types._OBSERVES_FIRST_TOKENS[_DoesNot] is False
    other = _Learns()
    assert first_token_observer(other) is other
    assert first_token_observer(_DoesNot()) is None
