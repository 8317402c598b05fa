"""The gateway's logs: a DEBUG line per request saying what was decided, the gateway's own
4xx at INFO once per route and reason a minute, JSON lines with trace ids, and never a
body or a key, in either format.

Lines are captured with a handler of the test's own on the root logger, formatted by the
gateway's formatters, so what is asserted is what an operator's terminal or log pipeline
would receive.
"""

from __future__ import annotations

import io
import json
import logging
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio
from support import SIM_KEY, clean_env, free_port, proxy_settings, running_proxy, running_simulator

from trio_batcher.logs import JsonFormatter, RefusalLog, route_family, set_trace_ids_provider
from trio_batcher.logs.formatting import text_formatter
from trio_batcher.settings import Settings
from trio_batcher.simulator import SimulatorConfig
from trio_batcher.tenants import hash_key

CLIENT_KEY = "tb-client-key-LOGSECRET-5f1e2d3c"
WRONG_KEY = "tb-wrong-key-LOGSECRET-0a9b8c7d"
PROMPT = "the-prompt-text-must-not-be-logged-7c3e"
MODEL = "claude-sonnet-4-5"
TRACE = ("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331")


@contextmanager
def captured(fmt: str = "text", level: int = logging.DEBUG) -> Iterator[io.StringIO]:
    """Every log line of the process while the block runs, formatted as ``fmt``."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter() if fmt == "json" else text_formatter())
    root = logging.getLogger()
    before = root.level
    root.addHandler(handler)
    root.setLevel(level)
    try:
        yield out
    finally:
        root.removeHandler(handler)
        root.setLevel(before)


def _tenants_file(tmp_path: Path) -> Path:
    path = tmp_path / "tenants.toml"
    path.write_text(f'[[tenant]]\nname = "acme"\nkey_sha256 = ["{hash_key(CLIENT_KEY)}"]\n')
    return path


@asynccontextmanager
async def gateway(
    tmp_path: Path, config: SimulatorConfig | None = None, **changes: Any
) -> AsyncIterator[str]:
    """A gateway for the tenant ``acme`` (``CLIENT_KEY``) in front of one simulator."""
    async with running_simulator(config) as sim:
        settings = proxy_settings(
            sim, tenants_file=str(_tenants_file(tmp_path)), data_dir=str(tmp_path / "data")
        ).replace(**changes)
        async with running_proxy(settings) as url:
            yield url


def _http(key: str = CLIENT_KEY) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(timeout=30, headers={"Authorization": f"Bearer {key}"})


def _chat(text: str = PROMPT, **extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": text}], **extra}


def _fields(line: str) -> dict[str, str]:
    """The ``key=value`` pairs of a text line."""
    return dict(re.findall(r"(\w+)=(\"[^\"]*\"|\S+)", line))


def _lines(out: io.StringIO, needle: str) -> list[str]:
    return [line for line in out.getvalue().splitlines() if needle in line]


async def test_a_request_at_debug_says_its_door_tenant_upstream_attempts_and_status(
    tmp_path: Path,
) -> None:
    with captured() as out:
        async with gateway(tmp_path) as url, _http() as http:
            reply = await http.post(f"{url}/v1/chat/completions", json=_chat())
            assert reply.status_code == 200, reply.text
            streamed = await http.post(f"{url}/v1/chat/completions", json=_chat(stream=True))
            assert streamed.status_code == 200
            counted = await http.post(
                f"{url}/v1/messages/count_tokens",
                json=_chat(),
                headers={"anthropic-version": "2023-06-01"},
            )
            assert counted.status_code == 200, counted.text
    done = _lines(out, "request done")
    assert len(done) == 3, out.getvalue()
    first, second, third = (_fields(line) for line in done)
    assert (third["door"], third["upstream"], third["status"]) == (
        "anthropic.count_tokens",
        "default",
        "200",
    )
    assert " DEBUG trio_batcher.requests: request done door=openai.chat " in done[0]
    assert first["tenant"] == "acme" and first["model"] == MODEL
    assert first["upstream"] == "default" and first["kind"] == "anthropic"
    assert first["attempts"] == "1" and first["status"] == "200"
    assert first["stream"] == "false" and second["stream"] == "true" and "ttft_ms" in second
    for key in ("gate_ms", "queue_ms", "slot_wait_ms", "upstream_ms", "total_ms"):
        assert float(first[key]) >= 0.0, key


async def test_nothing_is_noted_or_written_per_request_at_info(tmp_path: Path) -> None:
    with captured(level=logging.INFO) as out:
        async with gateway(tmp_path) as url, _http() as http:
            reply = await http.post(f"{url}/v1/chat/completions", json=_chat())
            assert reply.status_code == 200
    assert _lines(out, "request done") == []


def _upstreams(sims: list[str]) -> str:
    return "".join(
        f'[[upstream]]\nname = "up{i}"\nkind = "anthropic"\nbase_url = "{url}"\n'
        f'api_key_env = "LOGS_FLEET_KEY"\n\n'
        for i, url in enumerate(sims)
    )


async def test_a_failover_shows_in_the_request_line_with_its_cause(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOGS_FLEET_KEY", SIM_KEY)
    storm = SimulatorConfig(rate_529=1.0, retry_after_s=30)
    with captured() as out:
        async with AsyncExitStack() as stack:
            sims = [
                await stack.enter_async_context(running_simulator(c))
                for c in (storm, SimulatorConfig())
            ]
            path = tmp_path / "upstreams.toml"
            path.write_text(_upstreams([sim.url for sim in sims]))
            settings = Settings(upstreams_file=str(path), data_dir=str(tmp_path / "data"))
            url = await stack.enter_async_context(running_proxy(settings))
            async with httpx2.AsyncClient(timeout=30) as http:
                reply = await http.post(f"{url}/v1/chat/completions", json=_chat())
                assert reply.status_code == 200, reply.text
    (done,) = _lines(out, "request done")
    fields = _fields(done)
    assert fields["upstream"] == "up1" and fields["status"] == "200"
    assert fields["attempts"] == "2" and fields["tried"] == "up0:529-overloaded,up1:ok"
    (failover,) = _lines(out, "request failover")
    assert _fields(failover) == {
        "door": "openai.chat",
        "tenant": "anonymous",
        "model": MODEL,
        "from": "up0",
        "to": "up1",
        "cause": "529-overloaded",
    }


async def test_a_shed_request_is_logged_with_its_reason_door_and_tenant(
    tmp_path: Path,
) -> None:
    slow = SimulatorConfig(ttft_ms=400)
    with captured() as out:
        async with gateway(tmp_path, slow, max_inflight=1, max_queue=0) as url, _http() as http:
            replies: list[httpx2.Response] = []

            async def post() -> None:
                replies.append(await http.post(f"{url}/v1/chat/completions", json=_chat()))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(post)
                await trio.sleep(0.1)
                nursery.start_soon(post)
    assert sorted(r.status_code for r in replies) == [200, 429]
    (shed,) = _lines(out, "request refused")
    assert " INFO trio_batcher.refusals: " in shed
    assert _fields(shed) == {
        "status": "429",
        "reason": "queue_full",
        "method": "POST",
        "route": "/v1/chat/completions",
        "door": "openai.chat",
        "tenant": "acme",
    }


async def test_the_gateways_own_4xx_are_logged_once_per_route_and_reason(
    tmp_path: Path,
) -> None:
    with captured(level=logging.INFO) as out:
        async with gateway(tmp_path) as url, _http() as http:
            for _ in range(100):
                bad = await http.post(f"{url}/v1/chat/completions", json=_chat(n="two"))
                assert bad.status_code == 400
            unserved = await http.get(f"{url}/v1/embeddings/emb_123/more")
            assert unserved.status_code == 404
            async with _http(WRONG_KEY) as stranger:
                denied = await stranger.post(f"{url}/v1/chat/completions", json=_chat())
                assert denied.status_code == 401
    refused = [_fields(line) for line in _lines(out, "request refused")]
    assert refused == [
        {
            "status": "400",
            "reason": "invalid_request_error",
            "param": "n",
            "method": "POST",
            "route": "/v1/chat/completions",
            "door": "openai.chat",
            "tenant": "acme",
        },
        # The route family, not the path: it may hold an id.
        {
            "status": "404",
            "reason": "not_found",
            "method": "GET",
            "route": "/v1/embeddings/...",
            "tenant": "acme",
        },
        {
            "status": "401",
            "reason": "invalid_api_key",
            "method": "POST",
            "route": "/v1/chat/completions",
            "door": "openai.chat",
        },
    ]


def test_the_refusal_limiter_writes_one_line_a_minute_and_then_counts_the_rest() -> None:
    now = [1000.0]
    refusals = RefusalLog(logging.getLogger("test.refusals"), clock=lambda: now[0])
    with captured(level=logging.INFO) as out:
        for _ in range(100):
            refusals.refused(status=400, reason="bad_beta", method="POST", route="/v1/messages")
        now[0] += 59.0
        refusals.refused(status=400, reason="bad_beta", method="POST", route="/v1/messages")
        assert len(_lines(out, "request refused")) == 1
        refusals.refused(status=400, reason="other", method="POST", route="/v1/messages")
        now[0] += 2.0
        refusals.refused(status=400, reason="bad_beta", method="POST", route="/v1/messages")
    lines = _lines(out, "bad_beta")
    assert len(lines) == 2
    assert lines[1].endswith(
        "route=/v1/messages left_out=100 (and 100 more like it in the 61 s before this one)"
    )
    assert len(_lines(out, "reason=other")) == 1


def test_the_refusal_limiter_remembers_a_bounded_number_of_routes() -> None:
    refusals = RefusalLog(logging.getLogger("test.refusals"), capacity=8)
    with captured(level=logging.INFO) as out:
        for i in range(100):
            refusals.refused(status=404, reason="not_found", method="GET", route=f"/r{i}")
    assert len(refusals) == 8
    assert len(_lines(out, "request refused")) == 100


def test_a_route_family_never_holds_what_follows_its_first_two_segments() -> None:
    assert route_family("/v1/files/file-abc123/content") == "/v1/files/..."
    assert route_family("/v1/embeddings") == "/v1/embeddings"
    assert route_family("/v1/x", "/v1/files/<file_id>") == "/v1/files/<file_id>"


async def test_json_lines_parse_and_carry_the_fields_and_the_trace_ids(tmp_path: Path) -> None:
    set_trace_ids_provider(lambda: TRACE)
    try:
        with captured("json") as out:
            async with gateway(tmp_path) as url, _http() as http:
                reply = await http.post(f"{url}/v1/chat/completions", json=_chat())
                assert reply.status_code == 200
                bad = await http.post(f"{url}/v1/chat/completions", json=_chat(n="two"))
                assert bad.status_code == 400
            try:
                raise ValueError("first line\nsecond line")
            except ValueError:
                logging.getLogger("trio_batcher").exception("boom")
    finally:
        set_trace_ids_provider(None)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert all({"timestamp", "level", "logger", "message"} <= set(line) for line in lines)
    assert all(line["timestamp"].endswith("+00:00") for line in lines)
    (done,) = (line for line in lines if line["message"].startswith("request done"))
    assert done["level"] == "DEBUG" and done["logger"] == "trio_batcher.requests"
    assert (done["door"], done["tenant"], done["upstream"]) == ("openai.chat", "acme", "default")
    assert (done["attempts"], done["status"], done["stream"]) == (1, 200, False)
    assert (done["trace_id"], done["span_id"]) == TRACE
    (refused,) = (line for line in lines if line["message"].startswith("request refused"))
    assert (refused["status"], refused["param"], refused["level"]) == (400, "n", "INFO")
    (boom,) = (line for line in lines if line["message"] == "boom")
    assert "ValueError: first line\\nsecond line" in json.dumps(boom["exception"])


async def _drive(url: str) -> None:
    """Requests of every kind with the client key and the prompt text in them."""
    async with _http() as http:
        assert (await http.post(f"{url}/v1/chat/completions", json=_chat())).status_code == 200
        streamed = await http.post(f"{url}/v1/chat/completions", json=_chat(stream=True))
        assert streamed.status_code == 200
        native = await http.post(
            f"{url}/v1/messages",
            json={"max_tokens": 32, **_chat()},
            headers={"anthropic-version": "2023-06-01", "x-api-key": CLIENT_KEY},
        )
        assert native.status_code == 200, native.text
        bad = await http.post(f"{url}/v1/chat/completions", json=_chat(n=PROMPT))
        assert bad.status_code == 400
        gone = await http.get(f"{url}/v1/files/{PROMPT}/content")
        assert gone.status_code in (400, 404)
        # An unknown route is logged by its first two segments: what follows may be an id.
        unknown = await http.post(f"{url}/v1/embeddings/{PROMPT}", json=_chat())
        assert unknown.status_code == 404
    async with _http(WRONG_KEY) as stranger:
        assert (await stranger.post(f"{url}/v1/chat/completions", json=_chat())).status_code == 401


@pytest.mark.parametrize("fmt", ["text", "json"])
async def test_no_key_and_no_body_is_ever_logged(tmp_path: Path, fmt: str) -> None:
    with captured(fmt) as out:
        async with gateway(tmp_path) as url:
            await _drive(url)
    text = out.getvalue()
    assert "request done" in text and "request refused" in text  # something was logged
    for secret in (CLIENT_KEY, WRONG_KEY, SIM_KEY, PROMPT, "LOGSECRET"):
        assert secret not in text, secret


def test_serve_with_log_format_json_writes_hypercorns_lines_as_json(tmp_path: Path) -> None:
    env = clean_env(LOG_FORMAT="json", DATA_DIR=str(tmp_path / "data"))
    with subprocess.Popen(
        [sys.executable, "-m", "trio_batcher", "serve", "--simulate", "--port", str(free_port())],
        env={**env, "PYTHONPATH": os.pathsep.join(sys.path)},
        stderr=subprocess.PIPE,
        text=True,
    ) as process:
        try:
            assert process.stderr is not None
            line = process.stderr.readline()
        finally:
            process.terminate()
            process.wait(timeout=20)
    first = json.loads(line)
    assert first["logger"] == "hypercorn.error" and first["message"].startswith("Running on")
