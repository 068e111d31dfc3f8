"""Write a tiny llama-architecture GGUF with random weights and a real vocabulary.

    python scripts/tiny_llama_gguf.py VOCAB.gguf OUT.gguf

VOCAB.gguf is one of llama.cpp's vocab-only test files (``models/ggml-vocab-*.gguf``, shipped
in its source, e.g. inside the llama-cpp-python sdist); every ``tokenizer.*`` key is copied.
The model answers gibberish, but llama-server loads it, prefills, decodes and exports its
``/metrics`` exactly as for a real model: that is all scripts/capture_llamacpp_metrics.sh
needs. Needs numpy and llama.cpp's gguf-py (``PYTHONPATH=.../gguf-py``, or ``pip install
gguf``). Nothing here is imported by Meridian.
"""

from __future__ import annotations

import sys

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter  # type: ignore[import-not-found]

EMBD, LAYERS, HEADS, FF, CONTEXT = 64, 2, 4, 128, 2048


def copy_vocab(reader: GGUFReader, writer: GGUFWriter) -> int:
    tokens = 0
    for name, field in reader.fields.items():
        if not name.startswith("tokenizer."):
            continue
        kind = field.types[0]
        if kind is GGUFValueType.ARRAY:
            values = field.contents()
            writer.add_key_value(name, values, kind, sub_type=field.types[-1])
            if name == "tokenizer.ggml.tokens":
                tokens = len(values)
        else:
            writer.add_key_value(name, field.contents(), kind)
    return tokens


def main(vocab_path: str, out_path: str) -> None:
    reader = GGUFReader(vocab_path)
    writer = GGUFWriter(out_path, "llama")
    writer.add_name("meridian-tiny-llama-random")
    writer.add_context_length(CONTEXT)
    writer.add_embedding_length(EMBD)
    writer.add_block_count(LAYERS)
    writer.add_feed_forward_length(FF)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(HEADS)
    writer.add_rope_dimension_count(EMBD // HEADS)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(0)  # all F32
    vocab = copy_vocab(reader, writer)
    writer.add_vocab_size(vocab)
    rng = np.random.default_rng(0)

    def weight(*shape: int) -> np.ndarray:  # numpy shape = ggml ne reversed
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    writer.add_tensor("token_embd.weight", weight(vocab, EMBD))
    writer.add_tensor("output_norm.weight", np.ones(EMBD, np.float32))
    writer.add_tensor("output.weight", weight(vocab, EMBD))
    for layer in range(LAYERS):
        block = f"blk.{layer}"
        writer.add_tensor(f"{block}.attn_norm.weight", np.ones(EMBD, np.float32))
        for part in ("attn_q", "attn_k", "attn_v", "attn_output"):
            writer.add_tensor(f"{block}.{part}.weight", weight(EMBD, EMBD))
        writer.add_tensor(f"{block}.ffn_norm.weight", np.ones(EMBD, np.float32))
        writer.add_tensor(f"{block}.ffn_gate.weight", weight(FF, EMBD))
        writer.add_tensor(f"{block}.ffn_up.weight", weight(FF, EMBD))
        writer.add_tensor(f"{block}.ffn_down.weight", weight(EMBD, FF))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    print(f"{out_path}: llama, vocab {vocab}, embd {EMBD}, {LAYERS} layers, random weights")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
