"""Write a tiny Hugging Face llama checkpoint with random weights and a self-trained tokenizer.

    python scripts/tiny_hf_llama.py OUT_DIR

For engines that load HF checkpoints (vLLM's CPU build) when no model can be downloaded:
``config.json``, ``model.safetensors`` (random, ~2 MB), ``tokenizer.json`` (a byte-level BPE
of 512 tokens trained here on a few sentences) and ``tokenizer_config.json`` with a minimal
chat template. It answers gibberish; the engine loads, schedules, caches prefixes and exports
its ``/metrics`` as for any model. Needs torch, transformers and tokenizers (the engine's own
environment); nothing here is imported by Meridian.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch  # type: ignore[import-not-found]
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM  # type: ignore[import-not-found]

CORPUS = [
    "The quick brown fox jumps over the lazy dog and keeps running through the forest.",
    "Where does the time go? Nobody knows, but the gateway measures it anyway.",
    "def main(argv): return 0  # numbers 0 1 2 3 4 5 6 7 8 9",
] * 20
TEMPLATE = (
    "{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}</s>{% endfor %}"
    "{% if add_generation_prompt %}<s>assistant: {% endif %}"
)


def main(out: str) -> None:
    path = Path(out)
    path.mkdir(parents=True, exist_ok=True)
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=["<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(CORPUS, trainer)
    tokenizer.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": "<s>",
                "eos_token": "</s>",
                "chat_template": TEMPLATE,
                "model_max_length": 2048,
            }
        )
    )
    config = LlamaConfig(
        vocab_size=tokenizer.get_vocab_size(),
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,  # head size 64: one every CPU attention backend supports
        max_position_embeddings=2048,
        bos_token_id=0,
        eos_token_id=1,
        torch_dtype="bfloat16",
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(path)
    print(f"{path}: llama, vocab {config.vocab_size}, hidden 256, 2 layers, random weights")


if __name__ == "__main__":
    main(sys.argv[1])
