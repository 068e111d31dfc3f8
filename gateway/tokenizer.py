"""Real token counts for models whose operator ships a tokenizer (``tokenizers:`` in config).

Without one, a prompt's length is its canonical bytes ÷ 4 and its prefix blocks are 64-byte
slices (routing/prefix.py): right on average for English, off by a factor of 2 for code, numbers or
CJK text, and block boundaries that drift from the engine's. With the model's own
``tokenizer.json`` (read once when the config loads, with the ``tokenizers`` library; never
downloaded) the profile gets the real prompt length, and the prefix hashes cover blocks of
exactly ``block_tokens`` token ids, as the engine's KV cache does.

Tokenizing costs the request path tens of microseconds per thousand tokens (Rust); only
models with a configured tokenizer pay it.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from routing.prefix import block_hashes, canonical_chat, canonical_completion
from routing.types import RequestProfile


class Tokenizer(Protocol):
    def encode(
        self,
        sequence: Any,
        pair: Any | None = ...,
        is_pretokenized: bool = ...,
        add_special_tokens: bool = ...,
    ) -> Any: ...


def load_tokenizers(paths: Mapping[str, str]) -> dict[str, Tokenizer]:
    """Load every configured ``tokenizer.json``; raises ValueError naming the model and file."""
    if not paths:
        return {}
    try:
        from tokenizers import Tokenizer as HfTokenizer
    except ImportError:
        raise ValueError(
            "tokenizers: needs the 'tokenizers' package (pip install 'meridian-gateway[tokenizer]')"
        ) from None
    loaded: dict[str, Tokenizer] = {}
    for model, path in paths.items():
        if not Path(path).is_file():
            raise ValueError(f"tokenizers.{model}: no such file {path!r}")
        try:
            loaded[model] = HfTokenizer.from_file(path)
        except Exception as exc:  # the library raises its own exception types
            raise ValueError(
                f"tokenizers.{model}: {path!r} is not a tokenizer.json: {exc}"
            ) from None
    return loaded


def check_tokenizer_paths(paths: Mapping[str, str], served: set[str]) -> None:
    """Config validation without loading: known models, files that exist, the library."""
    unknown = sorted(set(paths) - served)
    if unknown:
        raise ValueError(f"tokenizers: no backend serves {', '.join(unknown)}")
    missing = sorted(f"{m} ({p})" for m, p in paths.items() if not Path(p).is_file())
    if missing:
        raise ValueError(f"tokenizers: no such file for {', '.join(missing)}")
    if paths:
        try:
            import tokenizers  # noqa: F401
        except ImportError:
            raise ValueError(
                "tokenizers: needs the 'tokenizers' package "
                "(pip install 'meridian-gateway[tokenizer]')"
            ) from None


def prompt_ids(tokenizer: Tokenizer, payload: Mapping[str, Any]) -> Sequence[int]:
    """The prompt as the model's token ids: the canonical chat text (routing/prefix.py) or
    the completion prompt; a prompt of token ids is its own answer."""
    if "messages" in payload:
        canonical = canonical_chat(payload["messages"], payload.get("tools"))
    else:
        prompt = payload.get("prompt")
        if isinstance(prompt, list) and all(isinstance(p, int) for p in prompt):
            return prompt
        canonical = canonical_completion(prompt)
    return canonical_ids(tokenizer, canonical)


def canonical_ids(tokenizer: Tokenizer, canonical: bytes) -> Sequence[int]:
    """Token ids of a canonical prompt (routing/prefix.py), as the model's tokenizer splits it."""
    ids: Sequence[int] = tokenizer.encode(
        canonical.decode(errors="replace"), add_special_tokens=False
    ).ids
    return ids


def id_block_hashes(ids: Sequence[int], tenant: str, block_tokens: int) -> tuple[int, ...]:
    """Chained hashes of blocks of exactly ``block_tokens`` token ids."""
    packed = struct.pack(f"<{len(ids)}I", *ids)  # 4 bytes an id: block_hashes' unit
    return block_hashes(packed, tenant, block_tokens)


def retokenize(profile: RequestProfile, ids: Sequence[int]) -> RequestProfile:
    """The profile with the real prompt length and token-aligned prefix blocks."""
    return dataclasses.replace(
        profile,
        prompt_tokens=len(ids),
        prefix_hashes=id_block_hashes(ids, profile.tenant, profile.block_tokens),
    )
