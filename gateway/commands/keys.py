"""``meridian keys``: create, list and revoke API keys (docs/security.md).

    meridian keys create --tenant acme [--model m1 ...] [--scope inference --scope admin]
                         [--expires-in-days 90] [--redis-url redis://127.0.0.1:6379/0]
    meridian keys list   --redis-url redis://127.0.0.1:6379/0 [--key-prefix meridian]
    meridian keys revoke <key id> --redis-url redis://127.0.0.1:6379/0

``create`` prints the key once — it is stored nowhere, only its SHA-256 is. With ``--redis-url``
the record goes to Redis (every replica picks it up within ``auth.refresh_s``); without, the
entry to paste under ``auth.keys`` in the operator file is printed.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from datetime import UTC, datetime, timedelta

import yaml
from pydantic import ValidationError
from redis.asyncio import Redis

from gateway.auth.config import KeyEntry
from gateway.auth.keys import digest, new_key
from gateway.auth.redis_keys import keys_hash, read_shared, record_of, revoked_set


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="meridian keys", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    create = commands.add_parser("create", help="make a key (printed once)")
    create.add_argument("--tenant", required=True)
    create.add_argument("--model", action="append", default=[], help="allowed model (repeat)")
    create.add_argument(
        "--scope", action="append", choices=["inference", "admin"], help="default: inference"
    )
    create.add_argument("--expires-in-days", type=float, default=None)
    for name, command in (("create", create), *_with_redis(commands)):
        command.add_argument("--redis-url", required=name != "create", help="redis:// URL")
        command.add_argument("--key-prefix", default="meridian", help="state.key_prefix")
    return parser


def _with_redis(
    commands: argparse._SubParsersAction,  # type: ignore[type-arg]
) -> list[tuple[str, argparse.ArgumentParser]]:
    listing = commands.add_parser("list", help="keys in Redis (ids, tenants; never keys)")
    revoke = commands.add_parser("revoke", help="revoke a key by id, on every replica")
    revoke.add_argument("key_id")
    return [("list", listing), ("revoke", revoke)]


async def _create(args: argparse.Namespace) -> int:
    key, key_id = new_key()
    expires = (
        datetime.now(UTC) + timedelta(days=args.expires_in_days)
        if args.expires_in_days is not None
        else None
    )
    try:
        entry = KeyEntry(
            id=key_id,
            sha256=digest(key),
            tenant=args.tenant,
            models=args.model,
            scopes=args.scope or ["inference"],
            expires_at=expires,
        )
    except ValidationError as exc:
        print(f"meridian keys: {exc.errors()[0]['msg']}", file=sys.stderr)
        return 2
    if args.redis_url:
        async with Redis.from_url(args.redis_url) as client:
            await client.hset(keys_hash(args.key_prefix), key_id, record_of(entry))
            await client.srem(revoked_set(args.key_prefix), key_id)
        print(f"key: {key}")
        print(f"id: {key_id}  (stored in Redis; the key is shown only now)")
        return 0
    print(f"key: {key}")
    print("# add under auth.keys in the operator file (the key itself is not in it):")
    print(yaml.safe_dump([entry.model_dump(mode="json", exclude_none=True)], sort_keys=False))
    return 0


async def _list(args: argparse.Namespace) -> int:
    async with Redis.from_url(args.redis_url) as client:
        keys, revoked = await read_shared(client, args.key_prefix)
    print(f"{'id':<10} {'tenant':<20} {'scopes':<18} {'models':<24} expires")
    for key in sorted(keys, key=lambda k: k.id):
        expires = (
            datetime.fromtimestamp(key.expires_at, UTC).isoformat() if key.expires_at else "never"
        )
        models = ",".join(sorted(key.models)) or "*"
        scopes = ",".join(sorted(key.scopes))
        state = " (revoked)" if key.id in revoked else ""
        print(f"{key.id:<10} {key.tenant:<20} {scopes:<18} {models:<24} {expires}{state}")
    return 0


async def _revoke(args: argparse.Namespace) -> int:
    async with Redis.from_url(args.redis_url) as client:
        await client.sadd(revoked_set(args.key_prefix), args.key_id)
        removed = await client.hdel(keys_hash(args.key_prefix), args.key_id)
    note = "" if removed else " (not in Redis: revoked for config-file keys too)"
    print(f"revoked {args.key_id}{note}")
    return 0


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    run = {"create": _create, "list": _list, "revoke": _revoke}[args.command]
    try:
        return asyncio.run(run(args))
    except OSError as exc:
        print(f"meridian keys: cannot reach Redis: {exc.strerror or exc}", file=sys.stderr)
        return 1
