"""What prefix-matching baselines (SGLang-style cache_aware, llm-d-style) share: they remember
the prompt prefix of every request they route to the backend they chose, take other replicas'
prefixes into the same index, and learn nothing else from outcomes."""

from __future__ import annotations

from collections.abc import Mapping

from routing.pipeline.scoring import ScoreContext, Scores
from routing.policies.predicted_ttft import record
from routing.prefix_index import PrefixIndex, PurgeProgress
from routing.types import Observation


class RemembersChosenPrefix:
    index: PrefixIndex

    def decided(self, ctx: ScoreContext, row: int, scores: Scores, position: int) -> None:
        profile = ctx.profile
        if profile.prefix_hashes:
            record(
                self.index,
                ctx.view.names[row],
                profile.prefix_hashes,
                profile.block_tokens,
                ctx.now,
            )

    def note_remote_prefix(self, backend: str, blocks: Mapping[int, float], now: float) -> int:
        return self.index.merge(backend, blocks, now)

    def purge_step(self, now: float, max_scan: int) -> PurgeProgress:
        return self.index.purge_step(now, max_scan)

    def observe(self, observation: Observation) -> None:
        return None
