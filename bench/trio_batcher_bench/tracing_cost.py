"""What traces cost: the proxy's CPU per request with OpenTelemetry traces on and off.

Two proxies run side by side against one simulator, identical but for
``OTEL_EXPORTER_OTLP_ENDPOINT`` (the traced one exports every span, by the SDK's batch
processor, to a sink in this process that answers each post and keeps nothing). The same
closed-loop load goes to one, then the other, in alternating short phases (off, on, off, on...),
so whatever else the machine does drifts over both alike; each phase's figure is the proxy's
own CPU (its export thread included) over the requests it answered. Reported: each round's
pair, the medians and their ratio (docs/benchmarks.md, "Traces on vs off")::

    python -m trio_batcher_bench.tracing_cost --rounds 6 --seconds 4 --clients 20
    python -m trio_batcher_bench.tracing_cost --ratio 0.1   # one trace in ten kept

Needs the ``otel`` extra installed beside the gateway.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx2
import trio

from .cpu import process_cpu_seconds

_BODY = {
    "model": "claude-sonnet-4-5",
    "max_tokens": 64,
    "messages": [{"role": "user", "content": "Say hello."}],
}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class _Sink(BaseHTTPRequestHandler):
    """An OTLP/HTTP endpoint that accepts and discards (an empty protobuf reply is valid)."""

    posts = 0

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        type(self).posts += 1
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _wait_ready(url: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx2.get(url, timeout=1).status_code < 500:
                return
        except httpx2.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not come up")


async def _phase(url: str, clients: int, seconds: float) -> int:
    done = 0
    stop = trio.current_time() + seconds
    async with httpx2.AsyncClient(timeout=30, limits=httpx2.Limits(max_connections=clients)) as c:

        async def worker() -> None:
            nonlocal done
            while trio.current_time() < stop:
                response = await c.post(f"{url}/v1/chat/completions", json=_BODY)
                if response.status_code == 200:
                    done += 1

        async with trio.open_nursery() as nursery:
            for _ in range(clients):
                nursery.start_soon(worker)
    return done


def _measure(url: str, pid: int, clients: int, seconds: float) -> float:
    before = process_cpu_seconds(pid) or 0.0
    done = trio.run(_phase, url, clients, seconds)
    after = process_cpu_seconds(pid) or 0.0
    return (after - before) * 1000 / max(done, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument(
        "--ratio", type=float, default=1.0, help="traces kept (parentbased_traceidratio)"
    )
    args = parser.parse_args()

    sink = ThreadingHTTPServer(("127.0.0.1", 0), _Sink)
    threading.Thread(target=sink.serve_forever, daemon=True).start()
    sim_port, off_port, on_port = _free_port(), _free_port(), _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(ANTHROPIC_BASE_URL=f"http://127.0.0.1:{sim_port}", ANTHROPIC_API_KEY="sk-bench")
    traced = {**env, "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{sink.server_port}"}
    if args.ratio < 1:
        traced["OTEL_TRACES_SAMPLER"] = "parentbased_traceidratio"
        traced["OTEL_TRACES_SAMPLER_ARG"] = str(args.ratio)
    py = [sys.executable, "-m", "trio_batcher"]
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    procs = [
        subprocess.Popen(
            [*py, "simulate", "--port", str(sim_port), "--ttft-ms", "20", "--tokens-per-s", "0"],
            env=env,
            **quiet,  # type: ignore[call-overload]
        ),
        off := subprocess.Popen([*py, "serve", "--port", str(off_port)], env=env, **quiet),  # type: ignore[call-overload]
        on := subprocess.Popen([*py, "serve", "--port", str(on_port)], env=traced, **quiet),  # type: ignore[call-overload]
    ]
    try:
        for port in (sim_port, off_port, on_port):
            _wait_ready(f"http://127.0.0.1:{port}/health")
        for pid, port in ((off.pid, off_port), (on.pid, on_port)):  # warm-up, unmeasured
            _measure(f"http://127.0.0.1:{port}", pid, args.clients, 1.0)
        pairs = []
        for i in range(args.rounds):
            a = _measure(f"http://127.0.0.1:{off_port}", off.pid, args.clients, args.seconds)
            b = _measure(f"http://127.0.0.1:{on_port}", on.pid, args.clients, args.seconds)
            pairs.append((a, b))
            print(f"round {i + 1}: off {a:.3f} ms  on {b:.3f} ms CPU/request", flush=True)
        off_ms = statistics.median(a for a, _ in pairs)
        on_ms = statistics.median(b for _, b in pairs)
        print(
            f"median: off {off_ms:.3f} ms, on {on_ms:.3f} ms CPU per request: "
            f"{(on_ms / off_ms - 1) * 100:+.1f}% with traces on "
            f"({_Sink.posts} OTLP posts received)"
        )
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(10)
        sink.shutdown()


if __name__ == "__main__":
    main()
