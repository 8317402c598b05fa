"""DNS rebinding: a keyless gateway serves stored data only under loopback names and
``ALLOWED_HOSTS``.

Live over loopback HTTP, since the question is what a rebinding page's requests (a foreign
``Host``, no ``Origin``: same-origin ``GET``s) get back.
"""

from __future__ import annotations

import json
from typing import Any

import httpx2
import pytest
from support import openai_client, proxy_and_simulator

from trio_batcher.edge.hosts import host_name, is_loopback
from trio_batcher.settings import Settings, SettingsError

MODEL = "claude-sonnet-4-5"
REBOUND = "rebind.attacker.example"


async def _stored_state(url: str) -> dict[str, str]:
    """A file, a batch and a response, stored by a well-behaved local client."""
    client = openai_client(url)
    line = {
        "custom_id": "a",
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]},
    }
    uploaded = await client.files.create(
        file=("in.jsonl", json.dumps(line).encode() + b"\n"), purpose="batch"
    )
    batch = await client.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    response = await client.responses.create(model=MODEL, input="remember 42")
    return {"file": uploaded.id, "batch": batch.id, "response": response.id}


def _routes(ids: dict[str, str]) -> list[tuple[str, str, Any]]:
    return [
        ("GET", "/v1/files", None),
        ("GET", f"/v1/files/{ids['file']}", None),
        ("GET", f"/v1/files/{ids['file']}/content", None),
        ("DELETE", f"/v1/files/{ids['file']}", None),
        ("GET", "/v1/batches", None),
        ("GET", f"/v1/batches/{ids['batch']}", None),
        ("POST", f"/v1/batches/{ids['batch']}/cancel", None),
        (
            "POST",
            "/v1/batches",
            {
                "input_file_id": ids["file"],
                "endpoint": "/v1/chat/completions",
                "completion_window": "24h",
            },
        ),
        ("GET", f"/v1/responses/{ids['response']}", None),
        ("GET", f"/v1/responses/{ids['response']}/input_items", None),
        ("DELETE", f"/v1/responses/{ids['response']}", None),
        # Other spellings of the same routes reach the same data.
        ("GET", f"//responses/{ids['response']}", None),
        (
            "POST",
            "/v1/responses",
            {"model": MODEL, "input": "what was it?", "previous_response_id": ids["response"]},
        ),
        (
            "POST",
            "/v1/responses",
            {"model": MODEL, "input": [{"type": "item_reference", "id": "msg_x"}]},
        ),
    ]


async def test_a_foreign_host_without_keys_gets_403_on_every_route_of_stored_data() -> None:
    async with (
        proxy_and_simulator(metrics_enabled=True) as (url, sim),
        httpx2.AsyncClient() as http,
    ):
        ids = await _stored_state(url)
        routes = _routes(ids)
        for method, path, body in routes:
            response = await http.request(
                method, f"{url}{path}", json=body, headers={"host": f"{REBOUND}:8000"}
            )
            assert response.status_code == 403, (method, path, response.text)
            error = response.json()["error"]
            assert error["code"] == "host_not_allowed", (method, path)
            assert error["type"] == "permission_error"
            assert "ALLOWED_HOSTS" in error["message"]
            assert REBOUND in error["message"]
        # In Anthropic's shape for a client that speaks it.
        anthropic = await http.get(
            f"{url}/v1/files", headers={"host": REBOUND, "anthropic-version": "2023-06-01"}
        )
        assert anthropic.status_code == 403
        assert anthropic.json()["type"] == "error"
        assert anthropic.json()["error"]["type"] == "permission_error"
        # Nothing was touched: the loopback client still sees all of it.
        for name in ("localhost", "127.0.0.5:1234", "[::1]:8000", "LOCALHOST."):
            listed = await http.get(f"{url}/v1/files", headers={"host": name})
            assert listed.status_code == 200, name
            assert [f["id"] for f in listed.json()["data"]] == [ids["file"]]
        kept = await http.get(f"{url}/v1/responses/{ids['response']}")
        assert kept.status_code == 200
        # What is not stored data still answers any name: models, a stateless generation.
        models = await http.get(f"{url}/v1/models", headers={"host": REBOUND})
        assert models.status_code == 200
        stateless = await http.post(
            f"{url}/v1/responses",
            json={"model": MODEL, "input": "hi", "store": False},
            headers={"host": REBOUND},
        )
        assert stateless.status_code == 200
        metrics = (await http.get(f"{url}/metrics")).json()
        assert metrics["rejected"]["by_reason"]["host_not_allowed"] == len(routes) - 1
        # The two refused POST /v1/responses never reached the upstream either.
        assert (await sim.stats())["requests_total"] == 2


async def test_allowed_hosts_and_keys_let_other_names_read() -> None:
    async with (
        proxy_and_simulator(allowed_hosts=("gateway.internal",)) as (url, _sim),
        httpx2.AsyncClient() as http,
    ):
        listed = await http.get(f"{url}/v1/files", headers={"host": "Gateway.Internal:8000"})
        assert listed.status_code == 200
        other = await http.get(f"{url}/v1/files", headers={"host": REBOUND})
        assert other.status_code == 403
    async with (
        proxy_and_simulator(proxy_api_keys=("sk-gw",)) as (url, _sim),
        httpx2.AsyncClient() as http,
    ):
        keyed = await http.get(
            f"{url}/v1/files", headers={"host": REBOUND, "authorization": "Bearer sk-gw"}
        )
        assert keyed.status_code == 200  # a page cannot know the key: no Host rule needed


@pytest.mark.parametrize(
    ("header", "name", "loopback"),
    [
        ("localhost:8000", "localhost", True),
        ("127.0.0.1", "127.0.0.1", True),
        ("127.1.2.3:80", "127.1.2.3", True),
        ("[::1]:8000", "[::1]", True),
        ("localhost.", "localhost", True),
        ("localhost.attacker.example", "localhost.attacker.example", False),
        ("127.0.0.1.attacker.example:80", "127.0.0.1.attacker.example", False),
        ("10.0.0.1", "10.0.0.1", False),
        ("[fe80::1]", "[fe80::1]", False),
        ("0.0.0.0:8000", "0.0.0.0", False),
    ],
)
def test_loopback_names(header: str, name: str, loopback: bool) -> None:
    assert host_name(header) == name
    assert is_loopback(name) is loopback


def test_allowed_hosts_setting_is_normalised_and_checked() -> None:
    settings = Settings.from_env({"ALLOWED_HOSTS": "Gateway.Internal., 10.0.0.5 ,[fd00::1],*"})
    assert settings.allowed_hosts == ("gateway.internal", "10.0.0.5", "[fd00::1]", "*")
    for bad in ("http://gateway.internal", "gateway.internal:8000", "*.example.com", "a/b"):
        with pytest.raises(SettingsError, match="ALLOWED_HOSTS"):
            Settings.from_env({"ALLOWED_HOSTS": bad})
