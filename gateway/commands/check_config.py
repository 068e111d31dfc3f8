"""``meridian check-config FILE``: validate without starting anything; ``--schema`` prints the
JSON Schema of the file format."""

from __future__ import annotations

import argparse
import sys

import orjson

from gateway.config import ConfigError, json_schema, load_config


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="meridian check-config", description=__doc__)
    parser.add_argument("config", nargs="?", help="the gateway YAML file to validate")
    parser.add_argument("--schema", action="store_true", help="print the config JSON Schema")
    args = parser.parse_args(argv)
    if args.schema:
        sys.stdout.write(orjson.dumps(json_schema(), option=orjson.OPT_INDENT_2).decode() + "\n")
        return 0
    if not args.config:
        parser.error("a config file is required (or --schema)")
    try:
        config = load_config(args.config)
        for backend in config.backends:
            if backend.api_key is not None:
                backend.api_key.resolve()
    except ConfigError as exc:
        print(f"invalid configuration:\n{exc}", file=sys.stderr)
        return 1
    models = ", ".join(config.models())
    print(f"{args.config}: OK — {len(config.backends)} backends, models: {models}")
    return 0
