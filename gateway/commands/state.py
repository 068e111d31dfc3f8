"""``meridian state inspect``: what Meridian keeps in the shared state store, in counts and
sizes (never prompt-derived contents beyond hash counts).

    meridian state inspect --config gateway.yaml        # uses its state: section
    meridian state inspect --redis-url redis://127.0.0.1:6379/0 [--key-prefix meridian]
    meridian state inspect --cluster-url redis://10.0.0.1:7000 --cluster-url ... [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
from pathlib import Path
from typing import Any

import orjson
import yaml
from pydantic import ValidationError

from gateway.state.config import StateConfig
from gateway.state.connect import open_store
from gateway.state.errors import StateUnavailable
from gateway.state.store import StoreSummary


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="meridian state", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    inspect = commands.add_parser("inspect", help="summarise what is stored")
    source = inspect.add_mutually_exclusive_group(required=True)
    source.add_argument("--config", type=Path, help="gateway config file (its state: section)")
    source.add_argument("--redis-url", help="redis://, rediss:// or unix:// URL")
    source.add_argument("--cluster-url", action="append", help="cluster seed node (repeatable)")
    inspect.add_argument("--key-prefix", default=None, help="deployment key prefix")
    inspect.add_argument("--password-env", default=None, help="env var holding the password")
    inspect.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    try:
        config = _config_from(args)
    except (OSError, ValueError, ValidationError) as exc:
        print(f"meridian state: {exc}", file=sys.stderr)
        return 2
    try:
        summary = asyncio.run(_summarise(config))
    except StateUnavailable as exc:
        print(f"meridian state: {exc.error}", file=sys.stderr)
        return 1
    if args.json:
        print(orjson.dumps(dataclasses.asdict(summary), option=orjson.OPT_INDENT_2).decode())
    else:
        print(render(summary, config.key_prefix))
    return 0


def _config_from(args: argparse.Namespace) -> StateConfig:
    data: dict[str, Any]
    if args.config is not None:
        loaded = yaml.safe_load(args.config.read_text(encoding="utf-8")) or {}
        if not isinstance(loaded, dict):
            raise ValueError(f"{args.config}: expected a mapping at the top level")
        section = loaded.get("state", {})
        if not isinstance(section, dict):
            raise ValueError(f"{args.config}: state: expected a mapping")
        data = dict(section)
    elif args.redis_url:
        data = {"backend": "redis", "url": args.redis_url}
    else:
        data = {"backend": "redis-cluster", "urls": args.cluster_url}
    if args.key_prefix:
        data["key_prefix"] = args.key_prefix
    if args.password_env:
        data["password_env"] = args.password_env
    # An operator tool may wait a little longer than the request path's background tasks.
    data["timeouts"] = {**data.get("timeouts", {}), "op_s": 5.0, "connect_s": 2.0}
    return StateConfig.model_validate(data)


async def _summarise(config: StateConfig) -> StoreSummary:
    store = open_store(config)
    try:
        return await store.summary()
    finally:
        await store.close()


def render(summary: StoreSummary, prefix: str) -> str:
    lines = [f"state store: {summary.backend}   key prefix: {prefix}"]
    if summary.server:
        lines.append("server: " + ", ".join(f"{k}={v}" for k, v in summary.server.items()))
    lines.append("")
    lines.append(f"{'kind':<14}{'keys':>8}{'memory (bytes)':>18}")
    for kind, count in summary.key_counts.items():
        memory = summary.memory_bytes.get(kind)
        lines.append(f"{kind:<14}{count:>8}{'' if memory is None else memory:>18}")
    lines.append("")
    lines.append(f"replicas alive: {len(summary.replicas)} {', '.join(summary.replicas)}")
    lines.append("leases:" + ("" if summary.leases else " none"))
    for name, holder in sorted(summary.leases.items()):
        lines.append(f"  {name:<30} held by {holder}")
    lines.append("in flight (all replicas):" + ("" if summary.in_flight else " none"))
    for backend, count in sorted(summary.in_flight.items()):
        lines.append(f"  {backend:<30} {count}")
    lines.append("prefix index (blocks per backend):" + ("" if summary.prefix_blocks else " none"))
    for backend, blocks in sorted(summary.prefix_blocks.items()):
        lines.append(f"  {backend:<30} {blocks}")
    return "\n".join(lines)
