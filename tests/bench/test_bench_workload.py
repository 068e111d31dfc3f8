"""Workloads: validation errors that say where and what, and deterministic prompt generation."""

from pathlib import Path
from typing import Any

import pytest

from loadtests.bench.plan import Planner, chat_messages, poisson_arrivals, request_body
from loadtests.bench.workload import WorkloadError, load_workload, parse_workload, with_overrides
from routing.prefix import BYTES_PER_TOKEN, block_hashes, canonical_chat

WORKLOADS = Path(__file__).resolve().parents[2] / "loadtests" / "workloads"

BASE = {
    "name": "t",
    "seed": 11,
    "arrival": {"mode": "closed", "concurrency": 2},
    "limits": {"requests": 10},
    "mix": [
        {"kind": "chat", "weight": 3, "system_prompt": {"groups": 2, "tokens": 64}},
        {"kind": "session", "turns": [2, 4], "user_tokens": 20, "max_tokens": [5, 9]},
    ],
    "populations": [
        {"origin": "us-east", "addresses": ["198.51.100.1"]},
        {"origin": "eu-west", "tenants": [{"name": "eu-only"}]},
    ],
    "tenants": [{"name": "acme"}, {"name": "globex", "weight": 2}],
}


def _with(**changes: Any) -> dict[str, Any]:
    return {**BASE, **changes}


@pytest.mark.parametrize("path", sorted(WORKLOADS.glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_workloads_are_valid(path):
    workload = load_workload(path)
    assert Planner(workload).session(0).turns


@pytest.mark.parametrize(
    ("data", "where", "what"),
    [
        (_with(arrival={"mode": "open"}), "arrival", "needs 'rate'"),
        (_with(arrival={"mode": "closed"}), "arrival", "needs 'concurrency'"),
        (_with(limits={}), "limits", "stops by itself"),
        (_with(mix=[]), "mix", "at least 1"),
        (_with(mix=[{"kind": "poem"}]), "mix.0", "poem"),
        (_with(mix=[{"kind": "chat", "max_tokens": [9, 3]}]), "mix.0.chat.max_tokens", "exceed"),
        (_with(mix=[{"kind": "chat", "wieght": 2}]), "mix.0.chat.wieght", "Extra inputs"),
        (_with(populations=[]), "populations", "at least one"),
        (_with(arrival={"mode": "open", "rate": -1}), "arrival.rate", "greater than 0"),
        (_with(arrival={"mode": "open", "rate": 1, "ramp_up_s": 2}), "arrival", "closed loop only"),
    ],
)
def test_validation_errors_name_the_key_and_the_expectation(data, where, what):
    with pytest.raises(WorkloadError) as caught:
        parse_workload(data, "w.yaml")
    message = str(caught.value)
    assert message.startswith("w.yaml: ")
    assert where in message and what in message


def test_unreadable_and_non_yaml_files_are_workload_errors(tmp_path):
    with pytest.raises(WorkloadError, match="cannot read"):
        load_workload(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("arrival: [unclosed")
    with pytest.raises(WorkloadError, match="not valid YAML"):
        load_workload(bad)


def test_overrides_are_validated_like_the_file():
    workload = parse_workload(BASE)
    changed = with_overrides(workload, mode="open", rate=3.0, requests=None, seed=5)
    assert (changed.arrival.mode, changed.arrival.rate, changed.seed) == ("open", 3.0, 5)
    assert changed.limits.requests == 10
    with pytest.raises(WorkloadError, match="needs 'rate'"):
        with_overrides(
            parse_workload(_with(arrival={"mode": "closed", "concurrency": 1})), mode="open"
        )


def test_same_seed_same_sessions_other_seed_other_prompts():
    first = [Planner(parse_workload(BASE)).session(i) for i in range(30)]
    again = [Planner(parse_workload(BASE)).session(i) for i in range(30)]
    other = [Planner(parse_workload(_with(seed=12))).session(i) for i in range(30)]
    assert first == again
    assert [s.turns for s in first] != [s.turns for s in other]
    # Session i does not depend on which sessions were planned before it.
    assert Planner(parse_workload(BASE)).session(17) == first[17]


def test_prompt_sizes_mix_weights_populations_and_tenants():
    planner = Planner(parse_workload(BASE))
    sessions = [planner.session(i) for i in range(600)]
    chats = [s for s in sessions if s.component == "chat0"]
    convs = [s for s in sessions if s.component == "session1"]
    assert 0.68 < len(chats) / len(sessions) < 0.82  # weight 3 : 1
    for session in chats:
        assert len(session.system_text or "") == 64 * BYTES_PER_TOKEN
        assert 64 * 4 <= len(session.turns[0].user_text) <= 256 * 4
    assert {len(s.turns) for s in convs} == {2, 3, 4}
    assert all(
        len(t.user_text) == 20 * 4 and 5 <= t.max_tokens <= 9 for s in convs for t in s.turns
    )
    assert {s.address for s in sessions if s.origin == "us-east"} == {"198.51.100.1"}
    assert {s.address for s in sessions if s.origin == "eu-west"} == {None}
    assert {s.tenant for s in sessions if s.origin == "eu-west"} == {"eu-only"}
    assert {s.tenant for s in sessions if s.origin == "us-east"} == {"acme", "globex"}


def test_shared_system_prompts_share_prefix_blocks_and_users_do_not():
    planner = Planner(parse_workload(BASE))
    chats = [s for s in (planner.session(i) for i in range(200)) if s.component == "chat0"]
    assert len({s.system_text for s in chats}) == 2  # two groups
    same_group = [s for s in chats if s.system_text == chats[0].system_text][:2]
    hashes = [block_hashes(canonical_chat(chat_messages(s, 0, []))) for s in same_group]
    shared = sum(1 for a, b in zip(*hashes, strict=False) if a == b)
    assert shared == 64 // 16  # the system prompt's whole blocks, then the users diverge
    assert len({s.turns[0].user_text for s in chats}) == len(chats)


def test_session_context_grows_with_each_reply():
    planner = Planner(parse_workload(BASE))
    session = next(s for s in (planner.session(i) for i in range(50)) if len(s.turns) >= 3)
    replies = ["first reply", "second reply"]
    sizes = [len(canonical_chat(chat_messages(session, t, replies[:t]))) for t in range(3)]
    assert sizes[0] < sizes[1] < sizes[2]
    body = request_body(session, 2, replies, user_field=True)
    assert [m["role"] for m in body["messages"]] == ["user", "assistant"] * 2 + ["user"]
    assert body["messages"][3]["content"] == "second reply"
    assert body["stream"] and body["stream_options"] == {"include_usage": True}
    assert body["user"] == session.tenant


def test_poisson_arrivals_are_seeded_with_the_right_mean_rate():
    arrivals = poisson_arrivals(50.0, seed=3)
    offsets = [next(arrivals) for _ in range(5000)]
    again = poisson_arrivals(50.0, seed=3)
    assert [next(again) for _ in range(5000)] == offsets
    assert 5000 / offsets[-1] == pytest.approx(50.0, rel=0.05)
