"""An Anthropic Messages request as a chat-completions request."""

from __future__ import annotations

from typing import Any

import orjson

from gateway.errors import bad_request

Payload = dict[str, Any]

# Sampling fields both APIs share (top_k: vLLM, SGLang and llama.cpp accept it too).
_SAME = ("temperature", "top_p", "top_k")


def messages_to_chat(payload: Payload) -> tuple[Payload, bool]:
    """Validate what the Messages API requires and translate; the second value says this form
    is what chat-only backends are sent."""
    max_tokens = payload.get("max_tokens")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise bad_request("'max_tokens' is required and must be a positive integer", "max_tokens")
    messages = payload.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad_request("'messages' must be a non-empty array", param="messages")
    chat: list[Payload] = []
    system = payload.get("system")
    if system is not None:
        chat.append({"role": "system", "content": _text(system, "system")})
    for index, message in enumerate(messages):
        chat.extend(_message(message, f"messages[{index}]"))
    out: Payload = {"model": payload.get("model"), "messages": chat, "max_tokens": max_tokens}
    for key in _SAME:
        if key in payload:
            out[key] = payload[key]
    if isinstance(payload.get("stop_sequences"), list):
        out["stop"] = payload["stop_sequences"]
    if payload.get("stream"):
        out["stream"] = True
        out["stream_options"] = {"include_usage": True}  # Messages streams always end with usage
    if isinstance(payload.get("tools"), list):
        out["tools"] = [_tool(tool, f"tools[{i}]") for i, tool in enumerate(payload["tools"])]
    choice = _tool_choice(payload.get("tool_choice"))
    if choice is not None:
        out["tool_choice"] = choice
    return out, True


def _text(content: object, where: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(block.get("text", ""))
            for block in content
            if isinstance(block, dict) and block.get("type") == "text"
        )
    raise bad_request(f"'{where}' must be a string or an array of text blocks", param=where)


def _message(message: object, where: str) -> list[Payload]:
    if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
        raise bad_request(f"'{where}' must have role 'user' or 'assistant'", param=where)
    role = message["role"]
    content = message.get("content")
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    if not isinstance(content, list):
        raise bad_request(f"'{where}.content' must be a string or an array", param=where)
    parts: list[Payload] = []
    tool_calls: list[Payload] = []
    results: list[Payload] = []
    for block in content:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            parts.append({"type": "text", "text": str(block.get("text", ""))})
        elif kind == "image" and isinstance(block.get("source"), dict):
            parts.append(_image(block["source"]))
        elif kind == "tool_use":
            arguments = orjson.dumps(block.get("input") or {}).decode()
            call = {"name": str(block.get("name", "")), "arguments": arguments}
            tool_calls.append(
                {"id": str(block.get("id", "")), "type": "function", "function": call}
            )
        elif kind == "tool_result":
            text = _text(block.get("content") or "", f"{where}.content")
            results.append(
                {"role": "tool", "tool_call_id": str(block.get("tool_use_id", "")), "content": text}
            )
    out: list[Payload] = list(results)  # tool results answer the previous assistant turn
    if parts or tool_calls or not results:
        turn: Payload = {"role": role, "content": _join(parts)}
        if tool_calls:
            turn["tool_calls"] = tool_calls
        out.append(turn)
    return out


def _join(parts: list[Payload]) -> str | list[Payload] | None:
    if all(part["type"] == "text" for part in parts):
        return "".join(part["text"] for part in parts) if parts else None
    return parts


def _image(source: Payload) -> Payload:
    if source.get("type") == "base64":
        url = f"data:{source.get('media_type', 'image/png')};base64,{source.get('data', '')}"
    else:
        url = str(source.get("url", ""))
    return {"type": "image_url", "image_url": {"url": url}}


def _tool(tool: object, where: str) -> Payload:
    if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
        raise bad_request(f"'{where}' must be an object with a string 'name'", param=where)
    function: Payload = {"name": tool["name"], "parameters": tool.get("input_schema") or {}}
    if isinstance(tool.get("description"), str):
        function["description"] = tool["description"]
    return {"type": "function", "function": function}


def _tool_choice(choice: object) -> object:
    if not isinstance(choice, dict):
        return None
    kind = choice.get("type")
    if kind == "tool":
        return {"type": "function", "function": {"name": choice.get("name")}}
    return {"auto": "auto", "any": "required", "none": "none"}.get(str(kind))
