"""The knobs of Meridian's predicted-TTFT policy (``routing.policies.predicted_ttft``), as the
operator file's ``routing.params`` for it: margins, the prefix index, the predictor, learning,
exploration, keep-warm and pre-warm."""

from __future__ import annotations

from pydantic import Field

from routing.policies.params import CommonParams


class PredictedTTFTParams(CommonParams):
    margin_ms: float = Field(
        default=2.0, ge=0, description="spread among candidates this close (ms)"
    )
    margin_rel: float = Field(default=0.03, ge=0, description="...or this fraction of the best")
    block_tokens: int = Field(default=16, gt=0, description="must match the profiles' block size")
    prefix_ttl_s: float = Field(default=600.0, gt=0)
    prefix_refresh_s: float = Field(
        default=1.0,
        ge=0,
        description="a backend's prefix blocks stamped no longer than this ago are not "
        "stamped again by the next request with them (0: every request does; at most a "
        "tenth of prefix_ttl_s is used): their expiry moves by at most this, and a hot prefix costs one write "
        "per backend per interval instead of one per request",
    )
    # ~145 bytes an entry (docs/memory.md): 7 MB per backend, 145 MB in all at the bounds. 50k
    # blocks of 16 tokens is 800k tokens, more KV cache than an 80 GB engine holds.
    prefix_max_entries_per_backend: int = Field(default=50_000, gt=0)
    prefix_max_entries_total: int = Field(default=1_000_000, gt=0)
    same_region_rtt_ms: float = Field(default=1.0, ge=0)
    unknown_rtt_ms: float = Field(default=100.0, ge=0)
    default_output_tokens: int = Field(default=256, gt=0)
    default_prompt_tokens: int = Field(default=1000, gt=0)
    stale_after_s: float = Field(default=5.0, gt=0)
    cold_ramp: float = Field(default=0.1, gt=0, lt=1)
    itl_batch_slope: float = Field(default=1.0, ge=0)
    step_phase: bool = Field(
        default=True,
        description="the candidates a decision returns take the wait for the engine's next "
        "step from the step clock (the tokens the gateway sees stream) instead of half a step "
        "(routing.step_clock); false: always half a step (the clock still listens)",
    )
    learning_rate: float = Field(default=0.1, gt=0, le=1)
    bias_learning_rate: float = Field(default=0.05, gt=0, le=1)
    peer_weight: float = Field(
        default=0.75,
        ge=0,
        le=1,
        description="weight of the correction learned over identically configured backends of "
        "a region (the rest: each backend's own)",
    )
    interactive_decode_weight: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description="weight of an interactive request's own decode time (ITL at the batch it "
        "joins x expected output) in its score; long-form requests weigh it fully",
    )
    others_decode_weight: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description="weight of the ITL a request adds to the batch it joins, over its output",
    )
    others_prefill_weight: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description="weight of the time a request's uncached prefill adds to the steps of the "
        "sequences decoding where it goes (running x predicted prefill), every class",
    )
    interactive_ttft_slack_ms: float = Field(
        default=float("inf"),
        ge=0,
        description="an interactive request's decode terms (the two weights above) may buy at "
        "most this much predicted TTFT over the best candidate's (inf: no bound); see "
        "routing.answer_score",
    )
    learned_half_life_s: float = Field(
        default=60.0,
        gt=0,
        description="a learned correction no sample refreshed for this long (after a few "
        "seconds' grace) is halfway back to configuration",
    )
    explore_share: float = Field(
        default=0.01,
        ge=0,
        le=0.05,
        description="at most this share of requests re-measures a backend whose evidence is "
        "old (0: never); see routing.exploration",
    )
    explore_after_s: float = Field(
        default=5.0, gt=0, description="evidence this old makes a backend worth re-measuring"
    )
    explore_horizon_s: float = Field(
        default=10.0,
        gt=0,
        description="a learned offset this old is not believed at all when judging whether a "
        "backend could be competitive (its spread widens until then)",
    )
    explore_within_ms: float = Field(
        default=50.0, ge=0, description="explore only within this of the best score..."
    )
    explore_within_rel: float = Field(default=0.5, ge=0, description="...or this fraction of it")
    explore_recheck_s: float = Field(
        default=0.25,
        ge=0,
        description="after a decision found no backend worth re-measuring, look again only "
        "this much later (0: at every decision); the look costs ~9 us a decision",
    )
    explore_backoff_after: int = Field(
        default=2,
        ge=0,
        description="explorations of a backend in a row that find its learned offset still "
        "there (at least half the last one's) before each further one doubles its horizon",
    )
    explore_backoff_max: float = Field(
        default=8.0,
        ge=1,
        description="the horizon grows up to this many times explore_horizon_s (1: no "
        "back-off): a backend slow for minutes is re-measured less often, and found "
        "recovered within about this many horizons",
    )
    first_token_overdue_factor: float = Field(
        default=3.0,
        ge=0,
        description="a backend whose waiting requests have all had no first token for this "
        "many times their predicted TTFT...",
    )
    first_token_overdue_ms: float = Field(
        default=100.0,
        ge=0,
        description="...plus this long is scored the ms it is overdue on top (routing.awaiting): "
        "a stalled backend stops taking traffic before any request to it times out",
    )
    keep_warm_margin_ms: float = Field(
        default=50.0,
        ge=0,
        description="score credit for a warm, idle serverless backend nearing its idle timeout "
        "(0: off); a request within this of the best keeps it warm",
    )
    keep_warm_after: float = Field(
        default=0.5, gt=0, lt=1, description="...once idle this fraction of its idle timeout"
    )
    prewarm_share: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description="keep at least this share of the serverless backends warm (rounded up; 0: "
        "off): the gateway sends each kept one that is cold, or idle for prewarm_after x its "
        "idle timeout, a one-token warm-up request. Costs warm capacity (those backends never "
        "scale to zero) and one warm-up per idle period; see routing.prewarm",
    )
    prewarm_after: float = Field(
        default=0.8,
        gt=0,
        lt=1,
        description="...a kept warm backend gets its warm-up once idle this fraction of its "
        "idle timeout (below 1 - cold_ramp, or the predictor already doubts it is warm)",
    )
