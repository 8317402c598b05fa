"""LiteLLM's proxy as a peer under the same load: configured like ours, started, always stopped.

The ``peers`` scenario compares trio-batcher with the gateway most teams would otherwise
run. LiteLLM is never a dependency of ours: the user installs it on its own (a scratch
venv, docs/benchmarks.md says how) and passes its executable with ``--litellm``.

What "equivalent" means here: one model entry, ``anthropic/claude-sonnet-4-5``, pointed at
the same simulator with the same key, one worker process (``--num_workers 1``, as our
``serve`` runs one), no database, no master key (ours runs keyless too; LiteLLM wants
``LITELLM_DANGEROUSLY_PERMIT_WEAK_OR_UNSET_MASTER_KEY`` for that), logging at ``ERROR``
and ``drop_params`` so a parameter it does not map is not an error. Callbacks, caching
and budgets stay off, which is LiteLLM's fastest configuration.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final, final

import httpx2
import trio

from .harness import MODEL
from .processes import SIM_KEY, ServerError, free_port, terminate

__all__ = ["PeerServer", "litellm_config", "running_litellm"]

# LiteLLM imports a great deal before it listens: ~13 s here, more on a cold disk.
_START_TIMEOUT_S: Final = 90.0
_POLL_S: Final = 0.25
_LOG_TAIL: Final = 2000


@final
@dataclass(frozen=True)
class PeerServer:
    """A running peer gateway: its base URL and pid."""

    name: str
    url: str
    pid: int


def litellm_config(upstream: str) -> str:
    """The proxy config (YAML, written out by hand: no YAML library needed for six lines)."""
    return (
        "model_list:\n"
        f"  - model_name: {MODEL}\n"
        "    litellm_params:\n"
        f"      model: anthropic/{MODEL}\n"
        f"      api_base: {upstream}\n"
        f"      api_key: {SIM_KEY}\n"
        "litellm_settings:\n"
        "  drop_params: true\n"
    )


@asynccontextmanager
async def running_litellm(
    executable: Path, upstream: str, log_dir: Path
) -> AsyncIterator[PeerServer]:
    """Start ``executable --config ...`` against ``upstream``, wait until it answers, yield
    it, and stop it (SIGTERM, then SIGKILL) however the block ends.

    Raises:
      ServerError: it exited or did not answer ``/health/liveliness`` in time (its log's
        tail is in the message).
    """
    await trio.Path(log_dir).mkdir(parents=True, exist_ok=True)
    config = log_dir / "litellm.yaml"
    await trio.Path(config).write_text(litellm_config(upstream))
    port = free_port()
    env = {
        **os.environ,
        "LITELLM_LOG": "ERROR",
        "LITELLM_DANGEROUSLY_PERMIT_WEAK_OR_UNSET_MASTER_KEY": "true",
        "LITELLM_TELEMETRY": "False",
        "NO_DOCS": "True",
    }
    argv = [str(executable), "--config", str(config), "--host", "127.0.0.1"]
    argv += ["--port", str(port), "--num_workers", "1"]
    log_path = log_dir / "litellm.log"
    with log_path.open("wb") as log:
        process = await trio.lowlevel.open_process(
            argv, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
        )
    url = f"http://127.0.0.1:{port}"
    try:
        await _wait_ready(process, url, log_path)
        yield PeerServer("litellm", url, process.pid)
    finally:
        with trio.CancelScope(shield=True):
            await terminate(process)


async def _wait_ready(process: trio.Process, url: str, log_path: Path) -> None:
    async with httpx2.AsyncClient(trust_env=False, timeout=2.0) as http:
        with trio.move_on_after(_START_TIMEOUT_S):
            while process.poll() is None:
                try:
                    if (await http.get(f"{url}/health/liveliness")).status_code == 200:
                        return
                except httpx2.TransportError:
                    pass
                await trio.sleep(_POLL_S)
    tail = (await trio.Path(log_path).read_text(errors="replace"))[-_LOG_TAIL:]
    state = "exited" if process.poll() is not None else f"not ready after {_START_TIMEOUT_S:g} s"
    raise ServerError(f"LiteLLM {state}:\n{tail}")
