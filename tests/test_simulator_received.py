"""The received-requests log: what the simulated upstream was sent, field for field.

Over real loopback HTTP, as a gateway test would use it (``GET /_sim/requests``), and in
process through the app's state (``app.sim.received``).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import anthropic
import httpx2
import pytest
import trio

from trio_batcher.serving import serve_app
from trio_batcher.simulator import SimulatorApp, SimulatorConfig, create_simulator_app
from trio_batcher.simulator import received as received_module

HEADERS = {"x-api-key": "sk-test-log", "anthropic-version": "2023-06-01"}
MODEL = "claude-haiku-4-5"


def ask(text: str = "Hello there, simulator", **changes: Any) -> dict[str, Any]:
    return {
        "model": MODEL,
        "max_tokens": 64,
        "messages": [{"role": "user", "content": text}],
        **changes,
    }


@asynccontextmanager
async def simulator(
    config: SimulatorConfig | None = None,
) -> AsyncIterator[tuple[SimulatorApp, httpx2.AsyncClient]]:
    """The simulator app on loopback (its state at hand) and a client for it."""
    app = create_simulator_app(config or SimulatorConfig())
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        host, port = await nursery.start(partial(serve_app, app, shutdown=stop))
        try:
            async with httpx2.AsyncClient(base_url=f"http://{host}:{port}") as http:
                yield app, http
        finally:
            stop.set()


async def logged(http: httpx2.AsyncClient, **params: Any) -> list[dict[str, Any]]:
    response = await http.get("/_sim/requests", params=params)
    assert response.status_code == 200
    entries: list[dict[str, Any]] = response.json()["requests"]
    return entries


def values(entry: dict[str, Any], name: str) -> list[str]:
    return [value for key, value in entry["headers"] if key == name]


async def test_the_sdk_request_is_logged_field_for_field_with_every_header() -> None:
    """Body (beta fields included), query, every header, status, request id."""
    body = ask(
        metadata={"user_id": "ü-1"},
        context_management={"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
    )
    async with simulator() as (_, http):
        transport = httpx2.AsyncClient(base_url=str(http.base_url))
        async with (
            transport,
            anthropic.AsyncAnthropic(
                base_url=str(http.base_url),
                api_key="sk-test-sdk",
                max_retries=0,
                http_client=transport,
                default_headers={"x-gateway-tenant": "acme"},
            ) as client,
        ):
            extra = {k: v for k, v in body.items() if k not in ("model", "max_tokens", "messages")}
            raw = await client.beta.messages.with_raw_response.create(
                model=MODEL,
                max_tokens=64,
                messages=[{"role": "user", "content": "Hello there, simulator"}],
                betas=["context-management-2025-06-27"],
                extra_body=extra,
                extra_query={"beta": "true"},
            )
        (entry,) = await logged(http)
    assert entry["method"] == "POST" and entry["path"] == "/v1/messages"
    assert entry["query"] == "beta=true"
    assert entry["json"] == body
    assert json.loads(entry["body"]) == body
    assert entry["body_truncated"] is False
    assert entry["status"] == 200
    assert entry["request_id"] == raw.headers["request-id"]
    # whichever way this SDK version sends the key, it is there as sent
    credentials = values(entry, "x-api-key") + values(entry, "authorization")
    assert credentials in (["sk-test-sdk"], ["Bearer sk-test-sdk"])
    assert values(entry, "anthropic-version") == [raw.http_request.headers["anthropic-version"]]
    assert values(entry, "anthropic-beta") == ["context-management-2025-06-27"]
    assert values(entry, "x-gateway-tenant") == ["acme"]
    assert values(entry, "user-agent")[0].startswith("AsyncAnthropic/Python")
    names = [name for name, _ in entry["headers"]]
    assert {"host", "content-type", "content-length", "x-stainless-lang"} <= set(names)
    assert all(name == name.lower() for name in names)


async def test_a_refused_request_is_logged_with_its_body_and_status() -> None:
    """A request refused before its body is read (bad key) still shows the body it carried;
    repeated headers keep every value, in order; Bearer credentials are kept as sent."""
    body = ask(unknown_field={"kept": [1, 2.5, None, "ü"]})
    async with simulator(SimulatorConfig(api_keys=frozenset({"sk-good"}))) as (_, http):
        raw = json.dumps(body).encode()
        response = await http.post(
            "/v1/messages",
            content=raw,
            headers=[
                ("authorization", "Bearer sk-wrong"),
                ("anthropic-version", "2023-06-01"),
                ("anthropic-beta", "a-2025-01-01,b-2025-01-01"),
                ("anthropic-beta", "c-2025-01-01"),
                ("content-type", "application/json"),
            ],
        )
        assert response.status_code == 401
        (entry,) = await logged(http)
    assert entry["status"] == 401
    assert entry["body"].encode() == raw and entry["json"] == body
    assert values(entry, "authorization") == ["Bearer sk-wrong"]
    assert values(entry, "anthropic-beta") == ["a-2025-01-01,b-2025-01-01", "c-2025-01-01"]


async def test_every_route_is_logged_but_the_simulators_own_and_non_json_is_text() -> None:
    async with simulator() as (_, http):
        await http.get("/v1/models", params={"limit": 1000}, headers=HEADERS)
        await http.head("/api/hello")
        await http.post("/v1/messages", content=b"not json {", headers=HEADERS)
        await http.post(
            "/v1/messages/count_tokens",
            json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}]},
            headers=HEADERS,
        )
        await http.get("/_sim/stats")
        entries = await logged(http)
    assert [(e["method"], e["path"], e["status"]) for e in entries] == [
        ("GET", "/v1/models", 200),
        ("HEAD", "/api/hello", 404),
        ("POST", "/v1/messages", 400),
        ("POST", "/v1/messages/count_tokens", 200),
    ]
    assert entries[0]["query"] == "limit=1000" and entries[0]["body"] == ""
    assert entries[0]["json"] is None
    assert entries[2]["body"] == "not json {" and entries[2]["json"] is None
    seqs = [e["seq"] for e in entries]
    assert seqs == sorted(seqs) and len(set(seqs)) == 4


async def test_the_log_keeps_the_newest_entries_and_resets() -> None:
    async with simulator(SimulatorConfig(request_log_entries=3)) as (app, http):
        for i in range(5):
            await http.post("/v1/messages", json=ask(f"request {i}"), headers=HEADERS)
        texts = [e["json"]["messages"][0]["content"] for e in await logged(http)]
        assert texts == ["request 2", "request 3", "request 4"]
        assert [e["json"]["messages"][0]["content"] for e in await logged(http, recent=1)] == [
            "request 4"
        ]
        assert await logged(http, recent=0) == []
        assert len(app.sim.received) == 3

        reset = await http.post("/_sim/requests/reset")
        assert reset.status_code == 200 and reset.json() == {"ok": True}
        assert await logged(http) == []

        await http.post("/v1/messages", json=ask("after"), headers=HEADERS)
        (entry,) = await logged(http)
        assert entry["seq"] == 6  # numbering goes on
        await http.post("/_sim/reset")  # resetting everything empties the log too
        assert await logged(http) == []


async def test_in_process_state_holds_the_same_entries() -> None:
    async with simulator() as (app, http):
        await http.post(
            "/v1/messages", json=ask(), headers={**HEADERS, "X-Claude-Code-Session-Id": "s-1"}
        )
        (entry,) = app.sim.received.entries()
        assert entry.header("X-CLAUDE-CODE-SESSION-ID") == "s-1"
        assert entry.header("x-api-key") == "sk-test-log" and entry.header("absent") is None
        assert entry.json() == ask() and entry.status == 200
        assert entry.to_json() == (await logged(http))[0]
        # the credentials never show in a repr (a failing assertion's message, a log line)
        assert "sk-test-log" not in repr(entry) and "sk-test-log" not in str(entry)


async def test_a_body_past_the_logged_size_is_truncated_but_still_delivered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(received_module, "BODY_BYTES", 100)
    raw = json.dumps(ask("x" * 500)).encode()
    async with simulator() as (_, http):
        response = await http.post(
            "/v1/messages", content=raw, headers={**HEADERS, "content-type": "application/json"}
        )
        assert response.status_code == 200  # the route read all of it
        (entry,) = await logged(http)
    assert entry["body_truncated"] is True and entry["json"] is None
    assert entry["body"].encode() == raw[:100]


async def test_no_log_when_configured_off() -> None:
    async with simulator(SimulatorConfig(request_log_entries=0)) as (app, http):
        response = await http.post("/v1/messages", json=ask(), headers=HEADERS)
        assert response.status_code == 200
        assert await logged(http) == [] and len(app.sim.received) == 0


def test_negative_log_size_is_refused() -> None:
    with pytest.raises(ValueError, match="sizes"):
        SimulatorConfig(request_log_entries=-1)


def test_stats_recent_never_returns_more_than_asked_nor_less_than_held() -> None:
    """``?recent=N`` is the newest N traces: all of them when N is more than are held."""
    from trio_batcher.simulator.stats import SimulatorStats, Trace

    stats = SimulatorStats()
    for i in range(5):
        stats.recent.append(Trace(request_id=f"req_{i}", started_at=float(i)))
    ids = [t["request_id"] for t in stats.snapshot(recent=2)["recent"]]
    assert ids == ["req_3", "req_4"]
    assert len(stats.snapshot(recent=7)["recent"]) == 5  # was 2 (the newest 7 - 5)
    assert stats.snapshot(recent=0)["recent"] == []
