"""Record ``visuals/data/metrics-snapshot.{json,js}``: a real proxy's ``/metrics`` over time.

observability.html polls a running proxy's ``GET /metrics``; opened from the file system it
has no proxy to poll, so it replays this recording instead. The recording is made the same
way a user would see it live: ``trio-batcher serve --simulate`` runs as a child process (the
simulated Anthropic upstream in-process, loopback only, no key), a seeded open-loop workload
of mixed models and streams goes through it in four phases (light, moderate, overload, calm),
and ``/metrics`` is polled every second. Nothing in the file is computed here: each entry of
``history`` is one ``/metrics`` answer, verbatim, and ``snapshot`` is the last one.

    python visuals/record_metrics.py            # about 40 s
    python visuals/record_metrics.py --seconds 20 --out /tmp/snap   # shorter, elsewhere
"""

from __future__ import annotations

import argparse
import os
import random
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import httpx2
import trio
from build_data import DATA, write_pair

ROOT: Final = Path(__file__).resolve().parent.parent

PROXY_SETTINGS: Final = {
    "METRICS_ENABLED": "1",
    "BATCH_ENABLED": "1",
    "BATCH_MAX_SIZE": "8",
    "BATCH_MAX_WAIT_MS": "10",
    "BATCH_MAX_CONCURRENCY": "12",
    "BATCH_ADAPTIVE": "1",
    "MAX_INFLIGHT": "24",
    "MAX_QUEUE": "12",
    "ACQUIRE_TIMEOUT_S": "1",
    "UPSTREAM_MAX_RETRIES": "2",
}
SIMULATOR_FLAGS: Final = [
    "--sim-ttft-ms", "120",
    "--sim-tokens-per-s", "200",
    "--sim-jitter", "0.2",
    "--sim-rate-529", "0.02",
    "--sim-rate-429", "0.005",
    "--sim-seed", "7",
]  # fmt: skip
# (model, share): priced families and one name the price table does not know, so the
# dashboard's "estimate incomplete" state is part of the recording.
MODELS: Final = [
    ("claude-sonnet-4-5", 0.55),
    ("claude-3-5-haiku-latest", 0.27),
    ("claude-opus-4-1", 0.12),
    ("acme-finetune-7b", 0.06),
]
STREAM_SHARE: Final = 0.3
# (share of the run, arrivals per second)
PHASES: Final = [(0.25, 8.0), (0.25, 20.0), (0.25, 60.0), (0.25, 8.0)]
_SERVING: Final = re.compile(r"serving OpenAI-compatible API on (http://\S+)/v1")


@contextmanager
def running_proxy(env: dict[str, str], flags: list[str]) -> Iterator[str]:
    """``trio-batcher serve --simulate --port 0`` as a child; yields its base URL."""
    cmd = [sys.executable, "-m", "trio_batcher", "serve", "--simulate", "--port", "0"]
    cmd += ["--log-level", "warning", *flags]
    base_env = {k: v for k, v in os.environ.items() if not k.startswith(("BATCH_", "MAX_"))}
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env={**base_env, **env}, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stderr is not None
        deadline = time.monotonic() + 30
        for line in proc.stderr:
            if m := _SERVING.search(line):
                break
            if time.monotonic() > deadline:
                raise RuntimeError("the proxy did not start within 30 s")
        else:
            raise RuntimeError(f"the proxy exited ({proc.wait()}) before serving")
        yield m.group(1)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _body(rng: random.Random) -> tuple[dict[str, Any], bool]:
    pick, model = rng.random(), MODELS[-1][0]
    for name, share in MODELS:
        if pick < share:
            model = name
            break
        pick -= share
    stream = rng.random() < STREAM_SHARE
    words = rng.randint(8, 40)
    body = {
        "model": model,
        "max_tokens": rng.choice([32, 64, 96]),
        "stream": stream,
        "messages": [{"role": "user", "content": " ".join(["tell me about trio"] * words)}],
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    return body, stream


async def _one(client: httpx2.AsyncClient, body: dict[str, Any], stream: bool) -> None:
    try:
        if stream:
            async with client.stream("POST", "/v1/chat/completions", json=body) as response:
                async for _ in response.aiter_bytes():
                    pass
        else:
            await client.post("/v1/chat/completions", json=body)
    except httpx2.HTTPError:
        pass  # the proxy counts whatever happened; the recording is its view


async def record(base: str, seconds: float, interval: float, seed: int) -> list[dict[str, Any]]:
    """Drive the workload against ``base`` and return every ``/metrics`` answer."""
    rng = random.Random(seed)
    history: list[dict[str, Any]] = []
    limits = httpx2.Limits(max_connections=400, max_keepalive_connections=400)
    timeout = httpx2.Timeout(30.0)
    async with (
        httpx2.AsyncClient(base_url=base, limits=limits, timeout=timeout) as client,
        httpx2.AsyncClient(base_url=base, timeout=timeout) as poller,
    ):

        async def poll() -> None:
            next_at = trio.current_time()
            while True:
                response = await poller.get("/metrics")
                response.raise_for_status()
                history.append(response.json())
                next_at += interval
                await trio.sleep_until(next_at)

        async with trio.open_nursery() as outer:
            outer.start_soon(poll)
            start = trio.current_time()
            async with trio.open_nursery() as load:
                at = start
                for share, rate in PHASES:
                    end = at + share * seconds
                    while at < end:
                        await trio.sleep_until(at)
                        body, stream = _body(rng)
                        load.start_soon(_one, client, body, stream)
                        at += rng.expovariate(rate)
                    at = end
            await trio.sleep(2 * interval)  # the last answers land in one more poll
            outer.cancel_scope.cancel()
    return history


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=40.0, help="workload length")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between polls")
    parser.add_argument("--seed", type=int, default=11, help="workload seed")
    parser.add_argument("--out", type=Path, default=DATA, help="directory for the data files")
    args = parser.parse_args(argv)
    with running_proxy(PROXY_SETTINGS, SIMULATOR_FLAGS) as base:
        history = trio.run(record, base, args.seconds, args.interval, args.seed)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    document = {
        "source": {
            "recorded_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "command": "python visuals/record_metrics.py "
            + " ".join(argv if argv is not None else sys.argv[1:]),
            "git_commit": commit or None,
            "proxy": "trio-batcher serve --simulate " + " ".join(SIMULATOR_FLAGS),
            "settings": PROXY_SETTINGS,
            "workload": {
                "phases": [
                    {"seconds": round(share * args.seconds, 1), "arrivals_per_s": rate}
                    for share, rate in PHASES
                ],
                "models": dict(MODELS),
                "stream_share": STREAM_SHARE,
                "seed": args.seed,
            },
        },
        "interval_s": args.interval,
        "snapshot": history[-1],
        "history": history,
    }
    write_pair("metrics-snapshot", "METRICS_SNAPSHOT", document, args.out)
    last = history[-1]
    print(
        f"record_metrics: {len(history)} polls, {last['requests']['total']} requests, "
        f"{last['rejected']['total']} shed; wrote {args.out}/metrics-snapshot.json/.js"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
