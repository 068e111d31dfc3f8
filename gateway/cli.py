"""The ``meridian`` command: a thin dispatcher to each subcommand's own module.

Each subcommand module exposes ``main(argv: list[str]) -> int`` and parses its own flags, so
subcommands stay independent and heavy imports happen only for the one that runs.
"""

from __future__ import annotations

import importlib
import sys

from gateway import __version__
from gateway.build_info import routing_build

SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("gateway.commands.serve", "run the gateway (embedded emulated fleet if no --config)"),
    "check-config": ("gateway.commands.check_config", "validate a config file and exit"),
    "emulate": ("loadtests.emulator.cli", "start an emulated GPU fleet from a fleet YAML"),
    "bench": ("loadtests.bench.cli", "load-generate against an OpenAI-compatible endpoint"),
    "sim": ("loadtests.sim.cli", "run a fleet-scale routing simulation scenario"),
    "state": ("gateway.commands.state", "inspect shared state stored in Redis"),
    "explain": ("gateway.commands.explain", "show how a request would be routed, term by term"),
    "keys": ("gateway.commands.keys", "create, list and revoke API keys"),
}

USAGE = "usage: meridian [--version] <command> [args...]\n\ncommands:\n" + "\n".join(
    f"  {name:<14}{help_}" for name, (_, help_) in SUBCOMMANDS.items()
)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in {"-h", "--help", "help"}:
        print(USAGE)
        return 0 if args else 2
    if args[0] == "--version":
        print(f"meridian {__version__} (routing: {routing_build()})")
        return 0
    entry = SUBCOMMANDS.get(args[0])
    if entry is None:
        print(f"meridian: unknown command {args[0]!r}\n\n{USAGE}", file=sys.stderr)
        return 2
    module = importlib.import_module(entry[0])
    code: int = module.main(args[1:])
    return code


if __name__ == "__main__":
    sys.exit(main())
