"""The ``peers`` scenario's parts: its arithmetic as data, LiteLLM's lifecycle with a stand-in
executable (LiteLLM itself is never installed by the tests), and CPU metered over a
supervisor's tree."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from functools import partial
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio

from trio_batcher_bench.cpu import process_cpu_seconds, tree_cpu_seconds
from trio_batcher_bench.litellm_peer import litellm_config, running_litellm
from trio_batcher_bench.peers_report import event_cpu_ms, peers_summary, peers_targets
from trio_batcher_bench.processes import ServerError
from trio_batcher_bench.scenarios import SCENARIOS

PLAIN, STREAMS, MANY = "50 clients, non-stream", "20 streams", "100 streams"


def row(
    load: str, via: str, per_s: float, p50: float, cpu: float | None, **extra: Any
) -> dict[str, Any]:
    return {
        "load": load,
        "via": via,
        "direct": via == "direct",
        "per_s": per_s,
        "p50_ms": p50,
        "p99_ms": p50 * 2,
        "cpu_ms_per_request": cpu,
        "errors": 0,
        **extra,
    }


ROWS = [
    row(PLAIN, "direct", 1000.0, 51.0, 1.5),
    row(PLAIN, "trio-batcher", 700.0, 70.0, 0.8),
    row(PLAIN, "trio-batcher ×2 workers", 920.0, 54.0, 0.9),
    row(PLAIN, "floor", 900.0, 55.0, 0.7),
    row(PLAIN, "LiteLLM", 140.0, 300.0, 8.8),
    row(STREAMS, "direct", 37.0, 538.0, 9.0, events_per_stream=54),
    row(STREAMS, "trio-batcher", 36.0, 541.0, 5.4, events_per_stream=30),
    row(STREAMS, "LiteLLM", 20.0, 800.0, 54.0, events_per_stream=60),
    row(MANY, "direct", 150.0, 600.0, 5.0, events_per_stream=54),
    row(MANY, "trio-batcher", 120.0, 700.0, 4.32, events_per_stream=12),
]


def test_the_table_puts_every_gateway_beside_direct_with_its_cpu_against_ours() -> None:
    summary = peers_summary(ROWS, workers=2)
    table = summary["table"]
    assert table["columns"][:4] == ["load", "via", "ok/s", "of direct"]
    by_via = {(r[0], r[1]): r for r in table["rows"]}
    litellm = by_via[(PLAIN, "LiteLLM")]
    assert litellm[3] == "14%" and litellm[5] == 249.0 and litellm[8] == "11.00×"
    assert by_via[(PLAIN, "direct")][7] is None  # the simulator's CPU is not a gateway's
    plain = summary["by_load"][PLAIN]
    assert plain["litellm_cpu_over_ours"] == 11.0
    assert plain["ours_cpu_over_floor"] == pytest.approx(1.14, abs=0.01)
    assert plain["throughput_of_direct"] == {
        "trio-batcher": 0.7,
        "2 workers": 0.92,
        "LiteLLM": 0.14,
    }
    assert plain["upstream_cpu_ms_per_request"] == 1.5
    # CPU per upstream event: per stream over what the simulator sent per stream (direct's).
    assert summary["by_load"][MANY]["ours_cpu_ms_per_upstream_event"] == 0.08
    assert event_cpu_ms(ROWS, STREAMS) == pytest.approx(0.1)


def test_each_target_is_met_or_missed_by_its_figure() -> None:
    targets = {t.name: t for t in peers_targets(ROWS, workers=2)}
    got = {name: (t.actual, t.met) for name, t in targets.items()}
    assert got == {
        "LiteLLM's CPU per request over ours, 50 clients non-stream": (11.0, True),
        "our CPU per request over the floor server's, 50 clients non-stream": (1.143, True),
        "LiteLLM's CPU per stream over ours, 20 streams": (10.0, True),
        "p50 the proxy adds over direct, 20 streams": (3.0, True),
        "our CPU per upstream event, 100 streams": (0.08, True),
        "throughput with 2 workers vs direct, 50 clients non-stream": (92.0, True),
    }
    slower = [dict(r, cpu_ms_per_request=1.0) if r["via"] == "trio-batcher" else r for r in ROWS]
    missed = {t.name: t.met for t in peers_targets(slower, workers=2)}
    assert missed["LiteLLM's CPU per request over ours, 50 clients non-stream"] is False
    assert missed["our CPU per request over the floor server's, 50 clients non-stream"] is False


def test_without_litellm_its_targets_are_not_applicable_rather_than_missed() -> None:
    rows = [r for r in ROWS if r["via"] != "LiteLLM"]
    targets = {t.name: t.met for t in peers_targets(rows, workers=2)}
    assert targets["LiteLLM's CPU per request over ours, 50 clients non-stream"] is None
    assert targets["LiteLLM's CPU per stream over ours, 20 streams"] is None
    assert targets["throughput with 2 workers vs direct, 50 clients non-stream"] is True
    assert "LiteLLM" not in peers_summary(rows, workers=2)["by_load"][PLAIN]["added_p50_ms"]


def test_peers_is_a_scenario_of_its_own() -> None:
    assert not SCENARIOS["peers"].in_all  # minutes long, and LiteLLM is the user's to install


def test_the_litellm_config_routes_the_model_to_the_simulator_with_its_key() -> None:
    config = litellm_config("http://127.0.0.1:9")
    assert "model: anthropic/claude-sonnet-4-5" in config
    assert "api_base: http://127.0.0.1:9\n" in config
    assert "api_key: sk-ant-bench-local-simulated" in config


# A stand-in for the litellm executable: the same command line, a liveliness endpoint.
FAKE = textwrap.dedent(
    f"""\
    #!{sys.executable}
    import argparse, http.server, sys
    parser = argparse.ArgumentParser()
    for flag in ("--config", "--host", "--port", "--num_workers"):
        parser.add_argument(flag)
    args = parser.parse_args()
    if "fail" in sys.argv[0]:
        print("cannot start: no such model", flush=True)
        sys.exit(3)
    open(args.config).read()  # the config was written before the start

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/health/liveliness" else 404)
            self.end_headers()

    http.server.HTTPServer((args.host, int(args.port)), Handler).serve_forever()
    """
)


def _fake(tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    path.write_text(FAKE)
    path.chmod(0o755)
    return path


async def test_litellm_is_started_until_it_answers_and_always_stopped(tmp_path: Path) -> None:
    executable = _fake(tmp_path, "litellm")
    async with running_litellm(executable, "http://127.0.0.1:9", tmp_path / "logs") as peer:
        async with httpx2.AsyncClient(trust_env=False) as http:
            assert (await http.get(f"{peer.url}/health/liveliness")).status_code == 200
        pid = peer.pid
    assert "api_base: http://127.0.0.1:9" in (tmp_path / "logs" / "litellm.yaml").read_text()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # terminate() waited for it: stopped and reaped


async def test_a_litellm_that_cannot_start_is_reported_with_its_log(tmp_path: Path) -> None:
    executable = _fake(tmp_path, "litellm-fail")
    with pytest.raises(ServerError, match=r"(?s)exited.*no such model"):
        async with running_litellm(executable, "http://127.0.0.1:9", tmp_path):
            pytest.fail("started")


def test_tree_cpu_counts_the_children_a_supervisor_runs() -> None:
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time\nt = time.process_time() + 0.2\n"
            "while time.process_time() < t: pass\ntime.sleep(30)",
        ],
    )
    try:
        for _ in range(500):  # until the child has spun its 0.2 s of CPU
            spent = process_cpu_seconds(child.pid) or 0.0
            if spent >= 0.15:
                break
            time.sleep(0.01)
        own = process_cpu_seconds(os.getpid())
        tree = tree_cpu_seconds(os.getpid())
        assert own is not None and tree is not None
        assert tree >= own + spent >= own + 0.15
    finally:
        child.kill()
        child.wait()


# -- the canned upstream the peers scenario measures against ------------------------------------


@pytest.mark.filterwarnings(
    r"ignore:Async generator '(openai|httpx2|httpcore2)\..*':ResourceWarning"
)
async def test_the_canned_upstream_is_a_messages_upstream_the_proxy_and_sdks_accept() -> None:
    from support import OPEN_CLIENTS, openai_client, running_proxy

    from trio_batcher import Settings
    from trio_batcher_bench.canned_upstream import _Handler

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            partial(trio.serve_tcp, _Handler(0.0, 0.0, 5), 0, host="127.0.0.1")
        )
        port = listeners[0].socket.getsockname()[1]
        settings = Settings(
            anthropic_base_url=f"http://127.0.0.1:{port}", anthropic_api_key="sk-ant-canned-test"
        )
        async with running_proxy(settings) as url:
            client = openai_client(url)
            messages = [{"role": "user", "content": "hi"}]
            whole = await client.chat.completions.create(
                model="claude-sonnet-4-5", messages=messages
            )
            assert whole.choices[0].message.content == "Canned reply:" + " token" * 5
            assert whole.usage is not None and whole.usage.completion_tokens == 5
            stream = await client.chat.completions.create(
                model="claude-sonnet-4-5", messages=messages, stream=True
            )
            text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
            assert text == " token" * 5
            while OPEN_CLIENTS:
                await OPEN_CLIENTS.pop().close()
        nursery.cancel_scope.cancel()
