"""An emulated GPU serving engine: OpenAI-compatible HTTP in front of a pure timing model.

``engine`` is the clock-injected model (continuous batching, chunked prefill, prefix cache,
scale-to-zero); ``server`` drives it in real time behind vLLM-shaped endpoints; ``cli`` runs a
whole fleet from a YAML file (``meridian emulate``).
"""
