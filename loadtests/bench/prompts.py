"""Synthetic prompt text: deterministic under a seed, sized in tokens the way Meridian counts them.

Meridian (``routing.prefix``) counts a token as ``BYTES_PER_TOKEN`` bytes of canonical text, so a
prompt of N tokens here is exactly ``N * BYTES_PER_TOKEN`` ASCII bytes. Text is cut from one
corpus built once per seed (cheap even for thousands of long prompts); every user message opens
with a unique tag so two requests share a cached prefix only when the workload says they do
(same system prompt group), never by accident.
"""

from __future__ import annotations

import random

from routing.prefix import BYTES_PER_TOKEN

_WORDS = (  # noqa: SIM905 (a word list reads better as prose)
    "the of and to in is that for it as was with be by on not he this are or his from at which "
    "but have an they you were her she there one all we their can has been if more when will "
    "would who so no time about into than them out up only other new some could these two may "
    "first then do any like my now over such our man me even most made after also did many "
    "before must through back years where much your way well down should because each just "
    "those people how too little state good very make world still own see men work long get "
    "here between both life being under never day same another know while last might us great "
    "old year off come since against go came right used take three routing gateway token cache "
    "region latency prefill decode batch queue model stream prompt signal backend replica"
).split()

CORPUS_BYTES = 1 << 18  # 64k tokens; longer prompts wrap around


def build_corpus(seed: int, size: int = CORPUS_BYTES) -> str:
    rng = random.Random(f"corpus:{seed}")
    words = rng.choices(_WORDS, k=size // 4)
    return " ".join(words)[:size]


class TextSource:
    """Cuts deterministic text of an exact token length from a per-seed corpus."""

    def __init__(self, seed: int) -> None:
        self._corpus = build_corpus(seed)

    def text(self, rng: random.Random, tokens: int, tag: str = "") -> str:
        """``tokens * BYTES_PER_TOKEN`` bytes: ``tag`` then corpus text from a random offset."""
        size = tokens * BYTES_PER_TOKEN
        head = f"[{tag}] " if tag else ""
        if size <= len(head):
            return head[:size]
        body_size = size - len(head)
        corpus = self._corpus
        start = rng.randrange(len(corpus))
        body = corpus[start : start + body_size]
        while len(body) < body_size:  # wrap around: prompts longer than the corpus tail
            body += corpus[: body_size - len(body)]
        return head + body
