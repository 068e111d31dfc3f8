"""Per-hop timing entries, their read-back, and the merged end-of-stream line."""

from __future__ import annotations

import orjson

from gateway.chain.hop import HopContext, enter_hop
from gateway.chain.hop_timing import (
    annotate_entries,
    breakdown,
    hops_from_header,
    merge_summary,
    parts_sum_ms,
    take_timing_comment,
)
from gateway.sse import SseSplitter, comment
from gateway.timing import TimingEntry, label_hop, parse, render


def _hop(gateway: str, via: str = "") -> HopContext:
    hop = enter_hop(gateway, 3, {"X-Meridian-Via": via} if via else {}, {})
    assert isinstance(hop, HopContext)
    return hop


def _own(gw: float, ttfb: float) -> list[TimingEntry]:
    return [
        TimingEntry("gw", gw),
        TimingEntry("route", 0.05, "predicted_ttft"),
        TimingEntry("upstream_connect", 0.0),
        TimingEntry("upstream_ttfb", ttfb),
        TimingEntry("ttft", gw + ttfb),
    ]


def test_two_hops_read_back_in_order_and_sum_to_the_first_hops_ttft() -> None:
    b_entries = _own(0.6, 30.0)  # B -> backend: 30 ms to the first token
    annotate_entries(b_entries, _hop("eu-gw", "us-gw"), "b1")
    a_entries = _own(0.4, 30.6 + 40.0)  # 40 ms between A and B
    a_entries += label_hop(parse(render(b_entries)), "to-eu")
    annotate_entries(a_entries, _hop("us-gw"), "to-eu")
    names = [e.name for e in parse(render(a_entries))]
    assert names[:7] == ["gw", "route", "upstream_connect", "upstream_ttfb", "ttft", "net", "hop"]
    assert names.index("to-eu.gw") > names.index("hop")
    assert "to-eu.net" not in names  # B's upstream is a plain backend
    hops = breakdown(parse(render(a_entries)))
    assert [h.gateway for h in hops] == ["us-gw", "eu-gw"]
    assert [h.label for h in hops] == ["", "to-eu."]
    assert hops[0].net_ms is not None and abs(hops[0].net_ms - 40.0) < 1e-6
    assert abs(parts_sum_ms(hops) - a_entries[4].dur_ms) < 0.01  # type: ignore[operator]


def test_a_single_hop_has_no_net_entry_and_sums_to_its_own_ttft() -> None:
    entries = _own(0.5, 12.0)
    annotate_entries(entries, _hop("us-gw"), "b1")
    hops = breakdown(entries)
    assert len(hops) == 1 and hops[0].net_ms is None and parts_sum_ms(hops) == 12.5


def test_the_downstream_timing_comment_is_taken_and_merged_after_this_hop() -> None:
    downstream = {"backend": "b1", "ttft_ms": 30.0, "hops": [{"gateway": "eu-gw", "x": 1}]}
    events = SseSplitter().feed(
        b'data: {"choices": []}\n\n'
        + comment("meridian-timing " + orjson.dumps(downstream).decode())
        + comment("keepalive")
        + b": meridian-timing not json\n\n"
    )
    taken = [take_timing_comment(e) for e in events]
    assert taken == [None, [{"gateway": "eu-gw", "x": 1}], None, []]
    flat = SseSplitter().feed(comment('meridian-timing {"backend": "b1"}'))
    assert take_timing_comment(flat[0]) == [{"backend": "b1"}]
    assert hops_from_header('{"backend": "b1"}') == [{"backend": "b1"}]
    assert hops_from_header(None) == [] and hops_from_header("[1]") == []
    merged = merge_summary({"backend": "to-eu", "ttft_ms": 71.0}, _hop("us-gw"), taken[1] or [])
    assert merged["backend"] == "to-eu" and merged["gateway"] == "us-gw"
    assert [h.get("gateway") for h in merged["hops"]] == ["us-gw", "eu-gw"]
    assert merged["hops"][0]["span_id"] == merged["span_id"]
