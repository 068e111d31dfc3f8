"""Public model names mapped to each backend's own id, aliases, and ``models.retrieve``: through
the gateway to emulated backends that only know their own ids (anything else is their 404)."""

from __future__ import annotations

from typing import Any

import aiohttp
import openai
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.config import ConfigError, parse_config
from gateway.model_names import rewrite_model
from gateway.state_keys import METRICS
from tests.gateway.support import EmulatorFactory, GatewayFactory

PUBLIC = "llama-3.1-8b"
GGUF = "/models/Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf"


def alias_config(url: str, **extra: Any) -> dict[str, Any]:
    return {
        "backends": [
            {
                "name": "llama",
                "region": "local",
                "url": url + "/v1",
                "engine": "llamacpp",
                "models": [PUBLIC],
                "model_ids": {PUBLIC: GGUF},
            }
        ],
        "model_aliases": {"llama3": PUBLIC},
        "timeouts": {"first_token_s": 5.0},
        **extra,
    }


async def _aliased(emulator: EmulatorFactory, gateway: GatewayFactory) -> tuple[str, Any]:
    backend = await emulator("llama", models=(GGUF,))
    running = await gateway(parse_config(alias_config(backend.url), "<test>"))
    return running.url, running


@pytest.mark.parametrize("name", [PUBLIC, "llama3"])
async def test_streaming_and_not_reach_the_backend_by_its_own_id(
    emulator: EmulatorFactory, gateway: GatewayFactory, name: str
) -> None:
    url, running = await _aliased(emulator, gateway)
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused")
    stream = await client.chat.completions.create(
        model=name, messages=[{"role": "user", "content": "hi"}], max_tokens=3, stream=True
    )
    chunks = [chunk async for chunk in stream]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    whole = await client.completions.create(model=name, prompt="Once", max_tokens=2)
    await client.close()
    assert text and whole.choices[0].text
    # answers name the model as the client did, never by the backend's file path
    assert {c.model for c in chunks} == {name} and whole.model == name
    # metrics count the public name, never the alias or the backend's path
    registry = running.app[METRICS].registry
    samples = [
        s.labels
        for metric in registry.collect()
        if metric.name == "meridian_requests"
        for s in metric.samples
    ]
    assert samples and all(labels["model"] == PUBLIC for labels in samples), samples


async def test_models_list_and_retrieve_show_public_names_only(
    emulator: EmulatorFactory, gateway: GatewayFactory
) -> None:
    url, _ = await _aliased(emulator, gateway)
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused")
    listed = [m.id for m in (await client.models.list()).data]
    retrieved = await client.models.retrieve("llama3")
    with pytest.raises(openai.NotFoundError) as missing:
        await client.models.retrieve(GGUF.lstrip("/"))
    await client.close()
    assert listed == ["llama-3.1-8b", "llama3"]
    assert (retrieved.id, retrieved.object) == ("llama3", "model")
    assert missing.value.status_code == 404
    body = missing.value.body
    assert isinstance(body, dict) and body.get("code") == "model_not_found"


async def test_a_backend_id_is_not_a_public_name(
    emulator: EmulatorFactory, gateway: GatewayFactory
) -> None:
    url, _ = await _aliased(emulator, gateway)
    body = {"model": GGUF, "messages": [{"role": "user", "content": "hi"}]}
    async with aiohttp.ClientSession() as session:
        async with session.post(url + "/v1/chat/completions", json=body) as response:
            assert response.status == 404


async def test_explain_names_the_public_model(
    emulator: EmulatorFactory, gateway: GatewayFactory
) -> None:
    url, _ = await _aliased(emulator, gateway)
    async with aiohttp.ClientSession() as session:
        params = {"model": "llama3", "prompt": "where does the time go"}
        async with session.get(url + "/v1/meridian/route", params=params) as response:
            assert response.status == 200, await response.text()
            text = await response.text()
    assert PUBLIC in text and GGUF not in text


def test_rewrite_keeps_every_other_byte() -> None:
    body = (
        b'{ "messages" : [{"role":"user","content":"the \\"model\\": x","model":"inner"}],\n'
        b'  "model" :  "llama3", "temperature": 1.0e0, "x": "\\u00e9"}'
    )
    out = rewrite_model(body, GGUF)
    assert out == body.replace(b'"llama3"', orjson.dumps(GGUF))
    assert orjson.loads(out)["messages"][0]["model"] == "inner"


@given(
    st.dictionaries(
        st.text(max_size=8).filter(lambda k: k != "model"),
        st.recursive(
            st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=10),
            lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner),
            max_leaves=8,
        ),
        max_size=4,
    ),
    st.text(min_size=1, max_size=12),
    st.text(min_size=1, max_size=12),
)
def test_rewrite_changes_only_the_model(fields: dict[str, Any], sent: str, target: str) -> None:
    body = orjson.dumps({**fields, "model": sent, "tail": {"model": sent}})
    out = orjson.loads(rewrite_model(body, target))
    assert out == {**fields, "model": target, "tail": {"model": sent}}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"model_aliases": {"llama3": "nope"}}, "no backend lists that model"),
        ({"model_aliases": {PUBLIC: PUBLIC}}, "already a model a backend serves"),
    ],
)
def test_alias_mistakes_are_config_errors(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config(alias_config("http://127.0.0.1:9", **change), "gw.yaml")


def test_model_ids_must_name_a_listed_model() -> None:
    data = alias_config("http://127.0.0.1:9")
    data["backends"][0]["model_ids"] = {"other": GGUF}
    with pytest.raises(ConfigError, match=r"gw.yaml: backends\[0\]: .*model_ids names models"):
        parse_config(data, "gw.yaml")
