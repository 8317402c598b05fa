"""The ``batch-memory`` scenario: a Batch API file ten times larger must not cost more memory.

Theory of operation
-------------------
One simulator (Message Batches processed at once) and two proxies, each its own process with
``BATCH_FILE_MAX_REQUESTS`` raised to 100,000: one runs a batch of ``SMALL`` lines, the other
of ``LARGE`` (10,000 and 100,000; a tenth of each with ``--quick``). A separate process each,
because peak RSS only ever grows: one process running both would report the larger file's
peak for both. The simulator is a third process, so the results it keeps are not counted.

Each proxy's RSS (``/proc/<pid>/status`` ``VmRSS``) is sampled every ``SAMPLE_S`` through
every phase of its batch: idle (after one warm-up batch of ``WARMUP`` lines, so imports
and first-use caches are in the baseline), ``upload`` (the multipart ``POST /v1/files``),
``validate-send`` (until ``in_progress``: every line translated, the Message Batch bodies
written to disk and streamed upstream), ``upstream`` (processing), ``deliver`` (results
spooled, put back in input order, written as output lines; until ``completed``) and
``download`` (``GET /v1/files/{id}/content`` of the output). The file is generated on disk
and streamed to the proxy, so the client's memory is not what is measured either.

The check: the large file's peak above its idle baseline is at most the small file's plus
``SLACK_MB`` -- ten times the lines, not ten times the memory.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Final

import httpx2
import trio

from .harness import Bench
from .processes import ProxyServer, running_stack
from .results import Check, ScenarioResult

__all__ = ["run_batch_memory"]

SMALL: Final = 10_000
LARGE: Final = 100_000
WARMUP: Final = 200
SAMPLE_S: Final = 0.02
SLACK_MB: Final = 16.0
MODEL: Final = "claude-haiku-4-5"
PHASES: Final = ("upload", "validate-send", "upstream", "deliver", "download")


def _rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def _write_input(path: Path, lines: int) -> int:
    with path.open("wb") as out:
        for n in range(lines):
            body = {
                "model": MODEL,
                "max_tokens": 16,
                "messages": [{"role": "user", "content": f"Classify item {n}: ok or not ok?"}],
            }
            line = {"custom_id": f"item-{n}", "method": "POST", "url": "/v1/chat/completions"}
            out.write(json.dumps({**line, "body": body}).encode() + b"\n")
    return path.stat().st_size


class _Sampler:
    """The peak RSS of one process in each named phase."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.phase = "idle"
        self.peaks: dict[str, float] = {}
        self.seconds: dict[str, float] = {}
        self._since = time.monotonic()

    def enter(self, phase: str) -> None:
        now = time.monotonic()
        self.seconds[self.phase] = self.seconds.get(self.phase, 0.0) + now - self._since
        self.phase, self._since = phase, now

    async def run(self) -> None:
        while True:
            rss = _rss_mb(self.pid)
            self.peaks[self.phase] = max(self.peaks.get(self.phase, 0.0), rss)
            await trio.sleep(SAMPLE_S)


async def _multipart(path: Path, boundary: str) -> AsyncIterator[bytes]:
    yield (
        f'--{boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="in.jsonl"\r\n'
        "Content-Type: application/jsonl\r\n\r\n"
    ).encode()
    async with await trio.open_file(path, "rb") as handle:
        while chunk := await handle.read(256 * 1024):
            yield chunk
    yield f"\r\n--{boundary}--\r\n".encode()


async def _run_batch(
    http: httpx2.AsyncClient, proxy: ProxyServer, path: Path, sampler: _Sampler | None
) -> dict[str, Any]:
    """Upload, create, follow and download one batch; the final batch object."""

    def enter(phase: str) -> None:
        if sampler is not None:
            sampler.enter(phase)

    boundary = "tb-bench-boundary"
    enter("upload")
    uploaded = await http.post(
        f"{proxy.url}/v1/files",
        content=_multipart(path, boundary),
        headers={"Content-Type": f"multipart/form-data; boundary={boundary}"},
    )
    uploaded.raise_for_status()
    enter("validate-send")
    created = await http.post(
        f"{proxy.url}/v1/batches",
        json={
            "input_file_id": uploaded.json()["id"],
            "endpoint": "/v1/chat/completions",
            "completion_window": "24h",
        },
    )
    created.raise_for_status()
    batch_id = created.json()["id"]
    phase_of = {"in_progress": "upstream", "finalizing": "deliver"}
    while True:
        batch = (await http.get(f"{proxy.url}/v1/batches/{batch_id}")).json()
        status = batch["status"]
        if status in phase_of and (sampler is None or sampler.phase != phase_of[status]):
            enter(phase_of[status])
        if status in ("completed", "failed", "expired", "cancelled"):
            break
        await trio.sleep(0.1)
    enter("download")
    lines = 0
    if batch.get("output_file_id"):
        async with http.stream(
            "GET", f"{proxy.url}/v1/files/{batch['output_file_id']}/content"
        ) as response:
            async for chunk in response.aiter_bytes():
                lines += chunk.count(b"\n")
    enter("done")
    return {**batch, "_output_lines": lines}


async def run_batch_memory(bench: Bench, scenario: ScenarioResult) -> None:
    opts = bench.options
    sizes = (
        {"small": SMALL // 10, "large": LARGE // 10}
        if opts.quick
        else {
            "small": SMALL,
            "large": LARGE,
        }
    )
    scenario.config = {"lines": sizes, "model": MODEL, "sample_s": SAMPLE_S}
    proxy_env = {"BATCH_FILE_MAX_REQUESTS": str(LARGE), "MAX_INFLIGHT": "0"}
    sim_args = ["--batch-processing-s", "0", "--batch-request-s", "0", "--ttft-ms", "0"]
    with tempfile.TemporaryDirectory(prefix="tb-batch-memory-") as scratch:
        files = {name: Path(scratch) / f"{name}.jsonl" for name in ("warmup", *sizes)}
        file_bytes = {
            name: await trio.to_thread.run_sync(
                _write_input, path, WARMUP if name == "warmup" else sizes[name]
            )
            for name, path in files.items()
        }
        proxies = dict.fromkeys(sizes, proxy_env)
        async with (
            running_stack(sim_args, proxies, opts.log_dir / "batch-memory") as stack,
            httpx2.AsyncClient(trust_env=False, timeout=600.0) as http,
        ):
            for name, size in sizes.items():
                proxy = stack.proxies[name]
                await _run_batch(http, proxy, files["warmup"], None)
                sampler = _Sampler(proxy.pid)
                started = time.monotonic()
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(sampler.run)
                    await trio.sleep(0.5)  # the idle baseline
                    batch = await _run_batch(http, proxy, files[name], sampler)
                    nursery.cancel_scope.cancel()
                baseline = sampler.peaks.get("idle", 0.0)
                peak = max(sampler.peaks.get(p, 0.0) for p in PHASES)
                scenario.summary[name] = {
                    "lines": size,
                    "file_mb": round(file_bytes[name] / 2**20, 1),
                    "status": batch["status"],
                    "output_lines": batch["_output_lines"],
                    "idle_rss_mb": round(baseline, 1),
                    "peak_rss_mb": round(peak, 1),
                    "peak_above_idle_mb": round(peak - baseline, 1),
                    "by_phase_mb": {p: round(sampler.peaks.get(p, 0.0), 1) for p in PHASES},
                    "seconds": {p: round(sampler.seconds.get(p, 0.0), 2) for p in PHASES},
                    "total_s": round(time.monotonic() - started, 1),
                }
                scenario.checks.append(
                    Check(
                        f"{name}: every line answered",
                        batch["status"] == "completed" and batch["_output_lines"] == size,
                        size,
                        batch["_output_lines"],
                        f"status {batch['status']}",
                    )
                )
    small, large = scenario.summary["small"], scenario.summary["large"]
    grew = large["peak_above_idle_mb"] - small["peak_above_idle_mb"]
    scenario.checks.append(
        Check(
            "ten times the lines, not ten times the memory",
            grew <= SLACK_MB,
            f"large peak above idle <= small's + {SLACK_MB:g} MB",
            f"{large['peak_above_idle_mb']} MB vs {small['peak_above_idle_mb']} MB",
        )
    )
