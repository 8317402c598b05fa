"""OpenTelemetry traces (``trio_batcher.tracing``), exported to a loopback OTLP receiver.

Each test turns traces on the standard way (``OTEL_EXPORTER_OTLP_ENDPOINT``) before the proxy
starts, makes real calls through the doors, stops the proxy (whose shutdown flushes the span
processor) and reads what the receiver got: the SERVER span per request, its queueing and
upstream-attempt children with the GenAI attributes, the trace context continued from the
client and carried upstream, and -- searched in the raw exported bytes -- no key and no prompt.
"""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
from contextlib import aclosing
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio
from fleet_support import gateway_and_simulator
from otlp_receiver import ReceivedSpan, Receiver, running_receiver
from support import (
    SIM_KEY,
    anthropic_client,
    clean_env,
    openai_client,
    proxy_settings,
    running_proxy,
    running_simulator,
)

from trio_batcher.logs import JsonFormatter, set_trace_ids_provider
from trio_batcher.simulator import SimulatorConfig
from trio_batcher.tracing import MissingTracingExtraError, check_tracing, tracing_requested
from trio_batcher.tracing import _otel as otel

MODEL = "claude-sonnet-4-5"
CLIENT_KEY = "sk-client-key-never-in-a-span-7731"
PROMPT = "Tell me about the zebra-quokka-4471 secret"
INCOMING_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
INCOMING_SPAN = "00f067aa0ba902b7"
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def receiver(monkeypatch: pytest.MonkeyPatch) -> Any:
    with running_receiver() as found:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", found.url)
        monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
        for name in ("OTEL_SDK_DISABLED", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES"):
            monkeypatch.delenv(name, raising=False)
        yield found


def _children(receiver: Receiver, parent: ReceivedSpan) -> list[ReceivedSpan]:
    return [s for s in receiver.spans if s.parent_span_id == parent.span_id]


def _server(receiver: Receiver, path: str) -> list[ReceivedSpan]:
    return [s for s in receiver.spans if s.kind == "SERVER" and s.attributes["url.path"] == path]


async def test_chat_stream_responses_calls_export_linked_genai_spans_without_keys_or_prompt(
    receiver: Receiver, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every wait a span, however short (by default only waits of 1 ms or more are).
    monkeypatch.setattr(otel, "MIN_WAIT_SPAN_NS", 0)
    async with running_simulator() as sim:
        settings = proxy_settings(
            sim,
            proxy_api_keys=(CLIENT_KEY,),
            data_dir=str(tmp_path / "data"),
        )
        async with running_proxy(settings) as url:
            chat = openai_client(url, api_key=CLIENT_KEY)
            await chat.chat.completions.create(
                model=MODEL,
                max_tokens=64,
                temperature=0.5,
                messages=[{"role": "user", "content": PROMPT}],
                extra_headers={"traceparent": f"00-{INCOMING_TRACE}-{INCOMING_SPAN}-01"},
            )
            messages = anthropic_client(url, api_key=CLIENT_KEY)
            async with messages.messages.stream(
                model=MODEL, max_tokens=50, messages=[{"role": "user", "content": PROMPT}]
            ) as stream:
                await stream.get_final_message()
            await chat.responses.create(model=MODEL, input=PROMPT, store=False)
        received = await sim.received()

    # -- the Chat call: continues the client's trace ----------------------------------------
    [server] = _server(receiver, "/v1/chat/completions")
    assert server.trace_id == INCOMING_TRACE
    assert server.parent_span_id == INCOMING_SPAN
    assert server.name == "POST /v1/chat/completions"
    assert server.resource["service.name"] == "trio-batcher"
    attributes = server.attributes
    assert attributes["http.request.method"] == "POST"
    assert attributes["http.route"] == "/v1/chat/completions"
    assert attributes["http.response.status_code"] == 200
    assert attributes["trio_batcher.door"] == "openai.chat"
    assert attributes["trio_batcher.gate_wait_s"] >= 0
    assert attributes["trio_batcher.dispatch_wait_s"] >= 0
    # The tenant's name (a key of PROXY_API_KEYS is named by a digest), never the key.
    assert attributes["trio_batcher.tenant"].startswith("key-")
    children = {s.name: s for s in _children(receiver, server)}
    assert {"gate wait", "dispatch wait", f"chat {MODEL}"} <= set(children)
    assert children["gate wait"].kind == "INTERNAL"
    assert children["gate wait"].attributes["trio_batcher.lane"] == "interactive"
    attempt = children[f"chat {MODEL}"]
    assert attempt.kind == "CLIENT"
    assert attempt.trace_id == INCOMING_TRACE
    genai = attempt.attributes
    assert genai["gen_ai.operation.name"] == "chat"
    assert genai["gen_ai.provider.name"] == "anthropic"
    assert genai["gen_ai.request.model"] == MODEL
    assert genai["gen_ai.request.max_tokens"] == 64
    assert genai["gen_ai.request.temperature"] == 0.5
    assert genai["gen_ai.response.model"] == MODEL
    assert genai["gen_ai.response.id"].startswith("msg_")
    assert genai["gen_ai.response.finish_reasons"] == ["end_turn"]
    assert genai["gen_ai.usage.input_tokens"] > 0
    assert genai["gen_ai.usage.output_tokens"] > 0
    assert genai["server.address"] == "127.0.0.1"
    assert genai["trio_batcher.upstream"] == "default"
    assert genai["trio_batcher.attempt"] == 1
    assert genai["trio_batcher.attempt.cause"] == "first"
    assert "error.type" not in genai
    # The upstream got the attempt's context, not the client's own span.
    chat_call = next(r for r in received if r["json"] and r["json"].get("max_tokens") == 64)
    headers = {name.lower(): value for name, value in chat_call["headers"]}
    assert headers["traceparent"] == f"00-{INCOMING_TRACE}-{attempt.span_id}-01"

    # -- the streamed Messages call: the attempt ends with the stream, with its usage ----------
    [server] = _server(receiver, "/v1/messages")
    assert server.parent_span_id == ""
    assert server.attributes["trio_batcher.door"] == "anthropic.messages"
    assert server.attributes["http.response.status_code"] == 200
    [attempt] = [s for s in _children(receiver, server) if s.kind == "CLIENT"]
    assert attempt.trace_id == server.trace_id
    genai = attempt.attributes
    assert genai["gen_ai.request.max_tokens"] == 50
    assert genai["gen_ai.response.time_to_first_chunk"] > 0
    assert "gen_ai.first_chunk" in attempt.events
    assert genai["gen_ai.response.finish_reasons"] == ["end_turn"]
    assert genai["gen_ai.usage.output_tokens"] > 0
    assert genai["gen_ai.response.id"].startswith("msg_")
    assert attempt.end_ns <= server.end_ns

    # -- the Responses call -------------------------------------------------------------------
    [server] = _server(receiver, "/v1/responses")
    assert server.attributes["trio_batcher.door"] == "openai.responses"
    [attempt] = [s for s in _children(receiver, server) if s.kind == "CLIENT"]
    assert attempt.attributes["gen_ai.operation.name"] == "chat"

    # -- nothing secret in what left the process ----------------------------------------------
    raw = receiver.raw
    for secret in (CLIENT_KEY, SIM_KEY, "zebra-quokka-4471"):
        assert secret.encode() not in raw
    assert "gen_ai.input.messages" not in str(receiver.spans)


async def test_a_429_call_records_each_attempt_with_its_cause(receiver: Receiver) -> None:
    config = SimulatorConfig(rate_429=1.0, retry_after_s=0.05)
    async with running_simulator(config) as sim:
        settings = proxy_settings(sim, upstream_max_retries=1)
        async with running_proxy(settings) as url, httpx2.AsyncClient() as http:
            response = await http.post(
                f"{url}/v1/chat/completions",
                json={"model": MODEL, "messages": [{"role": "user", "content": PROMPT}]},
            )
    assert response.status_code == 429
    [server] = _server(receiver, "/v1/chat/completions")
    assert server.attributes["http.response.status_code"] == 429
    attempts = sorted(
        (s for s in _children(receiver, server) if s.kind == "CLIENT"),
        key=lambda s: s.attributes["trio_batcher.attempt"],
    )
    assert [a.attributes["trio_batcher.attempt.cause"] for a in attempts] == ["first", "retry"]
    assert attempts[1].attributes["trio_batcher.attempt.after"] == "rate_limited"
    for attempt in attempts:
        assert attempt.attributes["error.type"] == "rate_limit_error"
        assert attempt.status_code == 2  # ERROR
        assert attempt.trace_id == server.trace_id
    assert b"zebra-quokka-4471" not in receiver.raw


async def test_content_is_captured_only_when_asked(
    receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "my-gateway")
    # No export on schedule: the spans arrive only because a graceful shutdown flushes them.
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "600000")
    async with running_simulator() as sim, running_proxy(proxy_settings(sim)) as url:
        chat = openai_client(url)
        await chat.chat.completions.create(
            model=MODEL, max_tokens=20, messages=[{"role": "user", "content": PROMPT}]
        )
    [attempt] = [s for s in receiver.spans if s.kind == "CLIENT"]
    assert PROMPT in attempt.attributes["gen_ai.input.messages"]
    assert '"role":"assistant"' in attempt.attributes["gen_ai.output.messages"]
    assert attempt.resource["service.name"] == "my-gateway"
    assert SIM_KEY.encode() not in receiver.raw


async def test_a_stream_the_client_leaves_ends_its_spans_as_abandoned(
    receiver: Receiver,
) -> None:
    config = SimulatorConfig(ttft_ms=10, tokens_per_s=20)  # a slow stream, ~60 tokens
    body = {
        "model": MODEL,
        "max_tokens": 60,
        "stream": True,
        "messages": [{"role": "user", "content": "hi"}],
    }
    async with running_simulator(config) as sim, running_proxy(proxy_settings(sim)) as url:
        async with (
            httpx2.AsyncClient() as http,
            http.stream("POST", f"{url}/v1/chat/completions", json=body) as response,
            aclosing(response.aiter_bytes()) as chunks,
        ):
            async for _ in chunks:
                break  # the first chunk, then the client hangs up
        with trio.fail_after(10):
            while not _server(receiver, "/v1/chat/completions"):  # noqa: ASYNC110
                await trio.sleep(0.05)  # the export thread posts within its 50 ms schedule
    [server] = _server(receiver, "/v1/chat/completions")
    [attempt] = [s for s in _children(receiver, server) if s.kind == "CLIENT"]
    assert attempt.attributes["error.type"] == "499"
    assert attempt.attributes["gen_ai.response.time_to_first_chunk"] > 0
    assert attempt.end_ns <= server.end_ns
    assert server.attributes["http.response.status_code"] == 200  # the stream had started


async def test_metrics_count_spans_and_export_failures(
    receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    receiver.status = 503
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")
    async with (
        running_simulator() as sim,
        running_proxy(proxy_settings(sim, metrics_enabled=True)) as url,
    ):
        chat = openai_client(url)
        await chat.chat.completions.create(
            model=MODEL, max_tokens=20, messages=[{"role": "user", "content": "hi"}]
        )
        async with httpx2.AsyncClient() as http:
            for _ in range(400):  # the export thread's first post, failed
                tracing = (await http.get(f"{url}/metrics")).json()["tracing"]
                if tracing["export_failures"]:
                    break
                await trio.sleep(0.02)
    assert tracing["enabled"] is True
    assert tracing["spans_started"] >= 2
    assert tracing["export_failures"] >= 1
    assert tracing["spans_exported"] == 0
    assert tracing["spans_dropped"] == 0


async def test_a_full_queue_drops_spans_and_counts_them(
    receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A collector that takes its time while the queue holds one span: the export thread is
    # busy posting one batch, every other span of the request finds the queue full.
    receiver.delay = 0.5
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "1")
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "1")
    async with (
        running_simulator() as sim,
        running_proxy(proxy_settings(sim, metrics_enabled=True)) as url,
    ):
        chat = openai_client(url)
        for _ in range(3):
            await chat.chat.completions.create(
                model=MODEL, max_tokens=20, messages=[{"role": "user", "content": "hi"}]
            )
        async with httpx2.AsyncClient() as http:
            tracing = (await http.get(f"{url}/metrics")).json()["tracing"]
    assert tracing["spans_started"] >= 6  # a SERVER and a CLIENT span per request
    assert tracing["spans_dropped"] >= 1
    assert tracing["spans_dropped"] + len(receiver.spans) <= tracing["spans_started"]


async def test_tracing_off_adds_no_header_upstream(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    async with running_simulator() as sim, running_proxy(proxy_settings(sim)) as url:
        messages = anthropic_client(url)
        await messages.messages.create(
            model=MODEL,
            max_tokens=20,
            messages=[{"role": "user", "content": "hi"}],
            extra_headers={"traceparent": f"00-{INCOMING_TRACE}-{INCOMING_SPAN}-01"},
        )
        [call] = [r for r in await sim.received() if r["path"] == "/v1/messages"]
    # The native relay forwards the client's anthropic-* headers only, as before traces.
    assert "traceparent" not in {name.lower() for name, _ in call["headers"]}


def test_tracing_off_imports_no_opentelemetry() -> None:
    script = (
        "import sys, trio, httpx2\n"
        "from trio_batcher import Settings, create_app\n"
        "from trio_batcher.simulator import SimulatorConfig\n"
        "import support\n"
        "async def main():\n"
        "    async with support.proxy_and_simulator(SimulatorConfig()) as (url, sim):\n"
        "        async with httpx2.AsyncClient() as http:\n"
        "            r = await http.post(url + '/v1/chat/completions', json={'model': 'claude-sonnet-4-5',"
        " 'messages': [{'role': 'user', 'content': 'hi'}]})\n"
        "            assert r.status_code == 200, r.text\n"
        "trio.run(main)\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    env = clean_env(PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]))
    for name in list(env):
        if name.startswith("OTEL_"):
            del env[name]
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_which_variables_turn_traces_on() -> None:
    assert tracing_requested({}) is None
    on = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}
    assert tracing_requested(on) == "OTEL_EXPORTER_OTLP_ENDPOINT"
    traces = {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}
    assert tracing_requested(traces) == "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
    assert tracing_requested({**on, "OTEL_SDK_DISABLED": "true"}) is None
    assert tracing_requested({**on, "OTEL_TRACES_EXPORTER": "none"}) is None
    assert check_tracing({}) is False
    assert check_tracing(on) is True


def test_tracing_asked_for_without_the_extra_fails_at_start_with_the_pip_command() -> None:
    # A path entry that shadows the SDK stands in for an environment without the extra.
    script = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.startswith('opentelemetry.sdk'):\n"
        "            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "from trio_batcher.tracing import MissingTracingExtraError, check_tracing\n"
        "try:\n"
        "    check_tracing({'OTEL_EXPORTER_OTLP_ENDPOINT': 'http://127.0.0.1:4318'})\n"
        "except MissingTracingExtraError as exc:\n"
        "    print(exc)\n"
    )
    env = clean_env(PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "pip install 'trio-batcher[otel]'" in done.stdout
    assert "OTEL_EXPORTER_OTLP_ENDPOINT" in done.stdout
    assert issubclass(MissingTracingExtraError, RuntimeError)


def test_serve_refuses_an_exporter_it_cannot_run() -> None:
    env = clean_env(
        OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:4317", OTEL_EXPORTER_OTLP_PROTOCOL="grpc"
    )
    env["ANTHROPIC_API_KEY"] = "sk-ant-unused"
    done = subprocess.run(
        [sys.executable, "-m", "trio_batcher", "serve", "--port", "0"],
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "OTEL_EXPORTER_OTLP_PROTOCOL" in done.stderr + done.stdout


async def test_a_json_log_line_carries_the_trace_and_span_ids_of_its_request(
    receiver: Receiver, tmp_path: Path
) -> None:
    """With traces on, a request's JSON log lines (its DEBUG ``request done`` line here)
    name the trace and the SERVER span they belong to, as exported: a line and its trace
    are found from each other. The logs' provider is the tracing's, set at start."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        async with running_simulator() as sim:
            settings = proxy_settings(sim, data_dir=str(tmp_path / "data"))
            async with running_proxy(settings) as url:
                chat = openai_client(url)
                await chat.chat.completions.create(
                    model=MODEL, max_tokens=16, messages=[{"role": "user", "content": "hi"}]
                )
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
        set_trace_ids_provider(None)
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    (done,) = (line for line in lines if line["message"].startswith("request done"))
    [server] = _server(receiver, "/v1/chat/completions")
    assert (done["trace_id"], done["span_id"]) == (server.trace_id, server.span_id)


@pytest.mark.parametrize("kind", ["bedrock", "vertex"])
async def test_a_cloud_upstream_call_carries_the_attempts_trace_context(
    receiver: Receiver, kind: str
) -> None:
    """Bedrock (the header signed with the rest, SigV4) and Vertex calls carry the attempt
    span's ``traceparent`` as Anthropic's do; the simulated clouds check the signature."""
    async with gateway_and_simulator(kind) as (url, sim):
        chat = openai_client(url)
        await chat.chat.completions.create(
            model=MODEL, max_tokens=16, messages=[{"role": "user", "content": "hi"}]
        )
        received = await sim.received()
    [server] = _server(receiver, "/v1/chat/completions")
    [attempt] = [s for s in _children(receiver, server) if s.kind == "CLIENT"]
    call = next(r for r in received if "/model/" in r["path"] or "Predict" in r["path"])
    headers = {name.lower(): value for name, value in call["headers"]}
    assert headers["traceparent"].startswith(f"00-{server.trace_id}-{attempt.span_id}-")
