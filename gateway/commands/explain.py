"""``meridian explain``: how the gateway would route one request, candidate by candidate.

    meridian explain --config FILE --model M --prompt-file F [--origin REGION|IP] [--api A] [--json]
    meridian explain --url http://127.0.0.1:8080 --model M --prompt-file F [--origin ...]

With ``--config`` it builds the configured router and a SignalHub, lets every probe and engine
metrics scrape run once (bounded by ``--settle-s``), then explains. That router is fresh: it has
learned nothing and its prefix index is empty, so bias, learned rates and cached tokens are at
their configured defaults. ``--url`` asks a running gateway instead (``/v1/meridian/route``,
served to loopback clients only), which explains with everything that gateway has learned.

The prompt file is plain text (one user message), or a JSON chat / completions request body.
Exit status: 0 explained, 1 configuration or gateway error, 2 bad arguments.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from prometheus_client import CollectorRegistry

from gateway.config import ConfigError, GatewayConfig, load_config
from gateway.errors import ApiError
from gateway.explain import (
    EXPLAIN_PATH,
    body_from_prompt,
    build_profile,
    endpoint_named,
    explain_report,
    known_regions,
    resolve_origin,
)
from gateway.explain_text import render_text
from gateway.fleet import build_signal_hub
from gateway.inbound import Endpoint, tenant_from
from gateway.model_names import ModelNames
from gateway.objectives import OBJECTIVE_HEADER, with_objective
from gateway.signals.hub import SignalHub
from routing.policies import build_router


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="meridian explain", description=__doc__)
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--config", help="gateway YAML: build its router and signals here")
    where.add_argument("--url", help="a running gateway's base URL: ask its live router")
    parser.add_argument("--model", required=True)
    parser.add_argument(
        "--prompt-file", required=True, help="text, or a JSON request body; - = stdin"
    )
    parser.add_argument("--origin", help="client region name, or client IP to locate with GeoIP")
    parser.add_argument("--tenant", default="default")
    parser.add_argument("--max-tokens", type=int)
    parser.add_argument(
        "--api",
        choices=[e.value for e in Endpoint],
        help="the door to explain a request to (default: chat, or completions for a prompt body)",
    )
    parser.add_argument(
        "--objective-ms", help="the request's p90 TTFT objective (sent as the objective header)"
    )
    parser.add_argument("--settle-s", type=float, default=5.0, help="bound on the first probes")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    return parser.parse_args(argv)


def _request_body(args: argparse.Namespace) -> bytes:
    """The body to explain: the file's JSON request (model overridden) or its text as a prompt."""
    raw = sys.stdin.read() if args.prompt_file == "-" else Path(args.prompt_file).read_text()
    try:
        payload = orjson.loads(raw)
    except orjson.JSONDecodeError:
        payload = None
    if isinstance(payload, dict) and ({"messages", "prompt", "input"} & payload.keys()):
        payload["model"] = args.model
        if args.max_tokens is not None:
            payload["max_tokens"] = args.max_tokens
        return orjson.dumps(payload)
    return body_from_prompt(args.model, raw, args.max_tokens, endpoint_named(args.api))


async def _settle(hub: SignalHub, config: GatewayConfig, bound_s: float) -> None:
    """Wait until every backend was probed and scraped once, or ``bound_s`` passed."""
    probes_on = config.signals.probes.enabled
    scraped = hub.scraper.scraped_backends if config.signals.engine_metrics.enabled else []
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        probed = all(s.last_probe_at is not None for s in hub.prober.summaries().values())
        scraped_all = all(hub.scraper.status(name) is not None for name in scraped)
        if (probed or not probes_on) and scraped_all:
            return
        await asyncio.sleep(0.05)


async def _explain_from_config(args: argparse.Namespace, body: bytes) -> dict[str, Any]:
    config = load_config(args.config)
    policy = config.routing
    router = build_router(policy.policy, policy.params, policy.seed)
    hub = build_signal_hub(config, CollectorRegistry())
    await hub.start()
    try:
        await _settle(hub, config, args.settle_s)
        hub.tick()
        regions = known_regions(hub, [r.name for r in config.regions])
        origin, geo = resolve_origin(hub, args.origin, regions)
        names = ModelNames.from_config(config)
        endpoint = endpoint_named(args.api)
        profile = build_profile(body, tenant_from(args.tenant), origin, names, endpoint)
        profile = with_objective(profile, config.objectives.force_header(), args.objective_ms)
        return explain_report(router, hub, profile, geo)
    finally:
        await hub.stop()


async def _explain_from_gateway(args: argparse.Namespace, body: bytes) -> dict[str, Any]:
    params = {"tenant": args.tenant}
    if args.origin:
        params["origin"] = args.origin
    if args.api:
        params["api"] = args.api
    url = args.url.rstrip("/") + EXPLAIN_PATH
    timeout = aiohttp.ClientTimeout(total=max(args.settle_s, 1.0))
    headers = {} if args.objective_ms is None else {OBJECTIVE_HEADER: args.objective_ms}
    async with aiohttp.ClientSession(timeout=timeout) as session:
        async with session.post(url, data=body, params=params, headers=headers) as response:
            payload = await response.read()
            if response.status != 200:
                raise ApiError(response.status, payload.decode(errors="replace")[:500])
    report: dict[str, Any] = orjson.loads(payload)
    return report


def main(argv: list[str]) -> int:
    args = _parse(argv)
    try:
        body = _request_body(args)
    except OSError as exc:
        print(f"meridian explain: cannot read {args.prompt_file}: {exc.strerror}", file=sys.stderr)
        return 2
    explain = _explain_from_config if args.config else _explain_from_gateway
    try:
        report = asyncio.run(explain(args, body))
    except ConfigError as exc:
        print(f"invalid configuration:\n{exc}", file=sys.stderr)
        return 1
    except ApiError as exc:
        print(f"meridian explain: HTTP {exc.status}: {exc.message}", file=sys.stderr)
        return 1
    except (aiohttp.ClientError, OSError) as exc:
        print(f"meridian explain: cannot reach {args.url}: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode())
    else:
        print(render_text(report))
    return 0
