"""Anthropic Messages (``POST /v1/messages``): passed through to backends that declare
``messages`` in ``apis`` (vLLM serves it), translated to and from chat completions for the
rest — system prompts, tools and tool results, stop reasons, usage, and the Messages SSE
event grammar (``message_start`` … ``message_stop``) and error shape."""
