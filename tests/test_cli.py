"""The command line as users run it: real processes, real ports, real signals."""

from __future__ import annotations

import os
import re
import selectors
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx2
import pytest
from support import clean_env, free_port

from trio_batcher import cli
from trio_batcher.settings import Settings
from trio_batcher.upstreams.config import read_upstreams_file

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


_SIM_LINE = re.compile(
    r"simulated upstream (\S+) \((\w+)\) on (\S+) -- overload it: curl -X POST (\S+) -d '(.*)'"
)


def _lines_until(proc: subprocess.Popen[str], count: int, timeout: float = 30.0) -> list[str]:
    """The first ``count`` lines the process writes to stderr, read from the pipe as they
    come (bypassing the text wrapper's buffer, which would hide lines from ``select``)."""
    assert proc.stderr is not None
    fd = proc.stderr.fileno()
    data = b""
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while data.count(b"\n") < count:
            left = deadline - time.monotonic()
            assert left > 0, f"only {data!r} after {timeout} s"
            if selector.select(left):
                chunk = os.read(fd, 65536)
                assert chunk, f"the process ended: {data!r}"
                data += chunk
    return data.decode().splitlines()


def test_simulate_upstreams_prints_each_url_and_how_to_overload_it(tmp_path: Path) -> None:
    upstreams_file = tmp_path / "upstreams.toml"
    args = [
        *[sys.executable, "-m", "trio_batcher", "simulate", "--log-level", "warning"],
        *["--upstreams", "anthropic,bedrock", "--port", "0"],
        *["--write-upstreams-file", str(upstreams_file)],
    ]
    with _process(args, clean_env()) as proc:
        lines = _lines_until(proc, 3)
        found = [match.groups() for line in lines if (match := _SIM_LINE.search(line))]
        assert [(name, kind) for name, kind, *_ in found] == [
            ("sim-anthropic-1", "anthropic"),
            ("sim-bedrock-1", "bedrock"),
        ]
        (_, _, anthropic_url, overload_url, body), (_, _, bedrock_url, other_overload, _) = found
        assert overload_url == f"{anthropic_url}/_sim/overload"
        assert other_overload == f"{bedrock_url}/_sim/overload"
        # The printed command works as curl would send it (a form content type, JSON text).
        started = httpx2.post(
            overload_url,
            content=body,
            headers={"content-type": "application/x-www-form-urlencoded"},
            timeout=5,
        )
        state = started.json()
        assert (state["active"], state["status"]) == (True, 529)
        assert 29 < state["remaining_s"] <= 30
        ask = {**HELLO, "max_tokens": 16}
        headers = {"x-api-key": "sk-ant-any", "anthropic-version": "2023-06-01"}
        refused = httpx2.post(f"{anthropic_url}/v1/messages", json=ask, headers=headers)
        assert refused.status_code == 529
        # Each has its own state: the other is not overloaded.
        assert httpx2.get(other_overload, timeout=5).json()["active"] is False
        served = httpx2.post(f"{bedrock_url}/v1/messages", json=ask, headers=headers)
        assert served.status_code == 200
        # The upstreams file names both; its credentials are in a 0600 file, never printed.
        specs = read_upstreams_file(upstreams_file)
        assert [(s.name, s.access.base_url) for s in specs] == [
            ("sim-anthropic-1", anthropic_url),
            ("sim-bedrock-1", bedrock_url),
        ]
        env_file = tmp_path / "upstreams.toml.env"
        assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
        exported = dict(
            line.removeprefix("export ").split("=", 1)
            for line in env_file.read_text().splitlines()
            if line.startswith("export ")
        )
        assert set(exported) == {
            "UPSTREAMS_FILE",
            "SIM_ANTHROPIC_API_KEY",
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_REGION",
        }
        assert "AWS_SECRET_ACCESS_KEY" in lines[2] and str(env_file) in lines[2]
        proc.send_signal(signal.SIGTERM)
        _, rest = proc.communicate(timeout=30)
        assert proc.returncode == 0, rest
    printed = "\n".join(lines) + rest
    assert exported["AWS_SECRET_ACCESS_KEY"] not in printed
    assert exported["AWS_ACCESS_KEY_ID"] not in printed


def test_sim_upstreams_flags_are_checked_before_anything_starts() -> None:
    base = [sys.executable, "-m", "trio_batcher"]
    cases = [
        (["serve", "--sim-upstreams", "anthropic"], "--sim-upstreams needs --simulate"),
        (
            ["serve", "--simulate", "--sim-upstreams", "anthropic,azure"],
            "--sim-upstreams: unknown upstream kind 'azure'",
        ),
        (["simulate", "--upstreams", ""], "--upstreams: expected a comma-separated list"),
        (["simulate", "--write-upstreams-file", "x.toml"], "--write-upstreams-file needs"),
    ]
    for argv, message in cases:
        done = subprocess.run(
            [*base, *argv], env=clean_env(), capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 2, (argv, done.stderr)
        assert message in done.stderr and "Traceback" not in done.stderr


def test_sim_upstreams_settings_route_the_gateway_across_the_fleet(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What ``serve --simulate --sim-upstreams`` hands the gateway: the generated
    UPSTREAMS_FILE (checked as any, by ``check_files``) and the credentials in this
    process's environment, which ``--workers`` children inherit."""
    from trio_batcher.simulator.fleet import (
        CloudIdentity,
        SimulatedFleet,
        SimulatedUpstream,
        prepare_environment,
    )

    fleet = SimulatedFleet(
        (
            SimulatedUpstream("sim-anthropic-1", "anthropic", "http://127.0.0.1:9001"),
            SimulatedUpstream("sim-bedrock-1", "bedrock", "http://127.0.0.1:9002"),
            SimulatedUpstream("sim-vertex-1", "vertex", "http://127.0.0.1:9003"),
        ),
        CloudIdentity.generate(vertex_key=True),
    )
    env = prepare_environment(fleet, tmp_path)
    checked: list[Settings] = []
    monkeypatch.setattr(cli, "check_files", checked.append)
    monkeypatch.setenv("AWS_PROFILE", "someone-else")
    for name in env:
        monkeypatch.setenv(name, "")  # so that monkeypatch restores each afterwards
    settings = cli._fleet_settings(Settings(), fleet, env)
    assert checked == [settings]
    assert settings.upstreams_file == env["UPSTREAMS_FILE"]
    assert settings.deployment_id is not None and settings.deployment_id.startswith("simulated")
    assert [s.name for s in read_upstreams_file(settings.upstreams_file)] == [
        "sim-anthropic-1",
        "sim-bedrock-1",
        "sim-vertex-1",
    ]
    for name, value in env.items():
        assert os.environ[name] == value
    assert "AWS_PROFILE" not in os.environ
    assert os.environ["AWS_ACCESS_KEY_ID"] == fleet.identity.aws_access_key_id
    assert Path(os.environ["GOOGLE_APPLICATION_CREDENTIALS"]).exists()


def test_serve_simulate_sim_upstreams_routes_around_an_overloaded_upstream() -> None:
    port = free_port()
    args = [
        *_serve_args(port),
        *["--sim-upstreams", "anthropic,bedrock,vertex", "--sim-ttft-ms", "0"],
        *["--sim-tokens-per-s", "0"],
    ]
    with _process(args, clean_env()) as proc:
        url = f"http://127.0.0.1:{port}"
        _wait_healthy(url, proc)
        lines = _lines_until(proc, 3)
        found = [match.groups() for line in lines if (match := _SIM_LINE.search(line))]
        assert [kind for _, kind, *_ in found] == ["anthropic", "bedrock", "vertex"]
        overloaded = httpx2.post(found[0][3], json={"for_s": 60}, timeout=5)
        assert overloaded.json()["active"] is True
        for turn in range(3):
            ask = {**HELLO, "messages": [{"role": "user", "content": f"Hello {turn}"}]}
            reply = httpx2.post(f"{url}/v1/chat/completions", json=ask, timeout=10)
            assert reply.status_code == 200, reply.text
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
        assert proc.returncode == 0, stderr
