"""``meridian check-config FILE``: validate without starting anything; ``--schema`` prints the
JSON Schema of the file format."""

from __future__ import annotations

import argparse
import sys

import orjson

from gateway.auth.wiring import check_listener
from gateway.config import ConfigError, json_schema, load_config
from gateway.config_secrets import unresolved_secrets
from gateway.config_warnings import config_warnings


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="meridian check-config", description=__doc__)
    parser.add_argument("config", nargs="?", help="the gateway YAML file to validate")
    parser.add_argument("--schema", action="store_true", help="print the config JSON Schema")
    parser.add_argument(
        "--allow-missing-secrets",
        action="store_true",
        help="check the file only: do not fail on secrets (env, file) this machine cannot read (CI)",
    )
    args = parser.parse_args(argv)
    if args.schema:
        sys.stdout.write(orjson.dumps(json_schema(), option=orjson.OPT_INDENT_2).decode() + "\n")
        return 0
    if not args.config:
        parser.error("a config file is required (or --schema)")
    try:
        config = load_config(args.config)
        check_listener(config.auth, config.listen.host)  # what serve would refuse, said here
    except ConfigError as exc:
        print(f"invalid configuration:\n{exc}", file=sys.stderr)
        return 1
    missing = unresolved_secrets(config, args.config)
    if missing and not args.allow_missing_secrets:
        print("missing secrets (--allow-missing-secrets checks the file alone):", file=sys.stderr)
        print("\n".join(missing), file=sys.stderr)
        return 1
    for line in missing:
        print(f"not checked (--allow-missing-secrets): {line}", file=sys.stderr)
    for warning in config_warnings(config):
        print(f"{args.config}: warning: {warning}", file=sys.stderr)
    models = ", ".join(config.models())
    print(f"{args.config}: OK — {len(config.backends)} backends, models: {models}")
    return 0
