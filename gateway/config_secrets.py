"""Find every secret reference in a loaded config and say, by file and key path, which of them
cannot be resolved here (an unset variable, an unreadable file).

It walks the whole model rather than a list of known fields, so a secret added to any section
is checked without touching this module.
"""

from __future__ import annotations

from collections.abc import Iterator

from pydantic import BaseModel

from gateway.config import ConfigError, SecretRef


def secret_refs(node: object, path: str = "") -> Iterator[tuple[str, SecretRef]]:
    """Every ``SecretRef`` under ``node``, with its key path as an operator wrote it."""
    if isinstance(node, SecretRef):
        yield path or "(top level)", node
    elif isinstance(node, BaseModel):
        for name in type(node).model_fields:
            yield from secret_refs(getattr(node, name), f"{path}.{name}" if path else name)
    elif isinstance(node, list | tuple):
        for index, item in enumerate(node):
            yield from secret_refs(item, f"{path}[{index}]")
    elif isinstance(node, dict):
        for key, item in node.items():
            yield from secret_refs(item, f"{path}.{key}" if path else str(key))


def unresolved_secrets(config: BaseModel, source: str) -> list[str]:
    """One line per secret that cannot be read: ``FILE: KEY.PATH: what is wrong``."""
    problems = []
    for path, ref in secret_refs(config):
        try:
            ref.resolve()
        except ConfigError as exc:
            problems.append(f"{source}: {path}: {exc}")
    return problems
