"""The command line as users run it: real processes, real ports, real signals."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx2
from support import clean_env, free_port

HELLO = {"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "Hello"}]}


def _wait_healthy(url: str, proc: subprocess.Popen[str], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[1]
        try:
            if httpx2.get(f"{url}/health", timeout=1).status_code == 200:
                return
        except httpx2.TransportError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"{url} did not become healthy")


@contextmanager
def _process(args: list[str], env: dict[str, str]) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=30)


def test_serve_simulate_answers_and_stops_gracefully_on_sigterm() -> None:
    port = free_port()
    args = [
        sys.executable,
        "-m",
        "trio_batcher",
        "serve",
        "--simulate",
        "--port",
        str(port),
        "--sim-ttft-ms",
        "0",
        "--sim-tokens-per-s",
        "0",
    ]
    with _process(args, clean_env()) as proc:
        url = f"http://127.0.0.1:{port}"
        _wait_healthy(url, proc)
        reply = httpx2.post(f"{url}/v1/chat/completions", json=HELLO, timeout=10)
        assert reply.status_code == 200 and reply.json()["object"] == "chat.completion"
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
        assert proc.returncode == 0, stderr
        assert "SIGTERM received" in stderr
        assert "Traceback" not in stderr


def _stall_a_stream(port: int) -> socket.socket:
    """A client that asks for a long stream, reads its first bytes, then never reads again."""
    body = (
        b'{"model":"claude-sonnet-4-5","stream":true,"max_tokens":64000,'
        b'"messages":[{"role":"user","content":"[[sim:tokens=20000]] long"}]}'
    )
    client = socket.create_connection(("127.0.0.1", port))
    client.sendall(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n\r\n" % len(body) + body
    )
    # 20,000 instant tokens are megabytes: the proxy's write blocks within milliseconds,
    # long before the shutdown that follows could finish.
    assert client.recv(1024).startswith(b"HTTP/1.1 200")
    return client


def _serve_args(port: int) -> list[str]:
    return [sys.executable, "-m", "trio_batcher", "serve", "--simulate", "--port", str(port)]


def test_shutdown_ends_even_with_a_client_that_stopped_reading() -> None:
    # hypercorn cannot interrupt a write to such a client; the process exits anyway once
    # the grace period and hypercorn's close are over (1 + 5 + 5 s here).
    port = free_port()
    env = clean_env(SHUTDOWN_GRACE_S="1", REQUEST_TIMEOUT_S="2")
    with _process([*_serve_args(port), "--sim-tokens-per-s", "0"], env) as proc:
        _wait_healthy(f"http://127.0.0.1:{port}", proc)
        client = _stall_a_stream(port)
        try:
            started = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            _, stderr = proc.communicate(timeout=30)
            assert time.monotonic() - started < 20
            assert proc.returncode == 0, stderr
            assert "exiting anyway" in stderr
        finally:
            client.close()


def test_a_second_signal_stops_at_once_with_130() -> None:
    port = free_port()
    with _process([*_serve_args(port), "--sim-tokens-per-s", "0"], clean_env()) as proc:
        _wait_healthy(f"http://127.0.0.1:{port}", proc)
        client = _stall_a_stream(port)
        try:
            proc.send_signal(signal.SIGTERM)
            time.sleep(0.3)
            started = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            _, stderr = proc.communicate(timeout=10)
            assert time.monotonic() - started < 5
            assert proc.returncode == 130, stderr
            assert "Traceback" not in stderr
        finally:
            client.close()


def test_app_runs_under_the_hypercorn_command_line_configured_from_the_environment() -> None:
    sim_port, port = free_port(), free_port()
    sim_args = [sys.executable, "-m", "trio_batcher", "simulate", "--port", str(sim_port)]
    hypercorn = [
        sys.executable,
        "-m",
        "hypercorn",
        "--worker-class",
        "trio",
        "--bind",
        f"127.0.0.1:{port}",
        "--graceful-timeout",
        "5",
        "trio_batcher.asgi:app",
    ]
    env = clean_env(
        ANTHROPIC_BASE_URL=f"http://127.0.0.1:{sim_port}",
        ANTHROPIC_API_KEY="sk-ant-test",
        METRICS_ENABLED="1",
    )
    with _process(sim_args, clean_env()) as sim, _process(hypercorn, env) as proc:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx2.get(f"http://127.0.0.1:{sim_port}/_sim/stats", timeout=1)
                break
            except httpx2.TransportError:
                assert sim.poll() is None and time.monotonic() < deadline
                time.sleep(0.1)
        url = f"http://127.0.0.1:{port}"
        _wait_healthy(url, proc)
        reply = httpx2.post(f"{url}/v1/chat/completions", json=HELLO, timeout=10)
        assert reply.status_code == 200, reply.text
        assert httpx2.get(f"{url}/metrics", timeout=5).json()["requests"]["success"] == 1
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)
        sim.send_signal(signal.SIGINT)
        sim.communicate(timeout=30)
        assert sim.returncode == 0
