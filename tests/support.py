"""Loopback hosting for tests: the simulator and the proxy, each in the test's own nursery.

Servers run under hypercorn on 127.0.0.1 port 0 and are shut down gracefully (lifespan
shutdown included) when the ``async with`` block ends -- not merely cancelled, which is what
pytest-trio's built-in ``nursery`` fixture would do.
"""

from __future__ import annotations

import gc
import os
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any

import httpx2
import trio

from trio_batcher import Settings, create_app
from trio_batcher.serving import serve_app
from trio_batcher.settings import SPECS
from trio_batcher.simulator import SimulatorConfig, run_simulator

SIM_KEY = "sk-ant-test-key-do-not-echo"

# SDK clients made during a test; running_proxy closes them before it stops the server,
# so hypercorn's graceful shutdown has no idle keep-alive connection to wait for.
OPEN_CLIENTS: list[Any] = []


def openai_client(url: str, **kwargs: Any) -> Any:
    """An ``openai.AsyncOpenAI`` for the proxy at ``url``: strict validation, no retries."""
    import openai

    client = openai.AsyncOpenAI(
        base_url=f"{url}/v1",
        api_key=kwargs.pop("api_key", "unused"),
        max_retries=kwargs.pop("max_retries", 0),
        _strict_response_validation=True,
        **kwargs,
    )
    OPEN_CLIENTS.append(client)
    return client


def anthropic_client(url: str, **kwargs: Any) -> Any:
    """An ``anthropic.AsyncAnthropic`` for the proxy at ``url`` (its base URL, as with
    ``ANTHROPIC_BASE_URL``), strict validation, no retries."""
    import anthropic

    client = anthropic.AsyncAnthropic(
        base_url=url,
        api_key=kwargs.pop("api_key", "unused"),
        max_retries=kwargs.pop("max_retries", 0),
        _strict_response_validation=True,
        **kwargs,
    )
    OPEN_CLIENTS.append(client)
    return client


@dataclass
class Sim:
    url: str

    async def received(self) -> list[dict[str, Any]]:
        """The requests the simulator received, oldest first (``/_sim/requests``)."""
        async with httpx2.AsyncClient() as client:
            response = await client.get(f"{self.url}/_sim/requests")
            response.raise_for_status()
            entries: list[dict[str, Any]] = response.json()["requests"]
            return entries

    async def stats(self) -> dict[str, Any]:
        async with httpx2.AsyncClient() as client:
            response = await client.get(f"{self.url}/_sim/stats")
            response.raise_for_status()
            data: dict[str, Any] = response.json()
            return data

    async def wait_until(self, predicate: Callable[[dict[str, Any]], Any]) -> dict[str, Any]:
        """Poll ``/_sim/stats`` until ``predicate(stats)``; put a deadline around the call.

        Polling is the only option: the simulator is another server, with no event to wait on.
        """
        while not predicate(stats := await self.stats()):  # noqa: ASYNC110
            await trio.sleep(0.005)
        return stats

    async def reset(self) -> None:
        async with httpx2.AsyncClient() as client:
            (await client.post(f"{self.url}/_sim/reset")).raise_for_status()


@asynccontextmanager
async def _hosting(serve: Callable[..., Awaitable[None]]) -> AsyncIterator[tuple[str, int]]:
    """Run ``serve(shutdown=..., task_status=...)``; stop it gracefully however the body ends.

    A failing test body must not turn the shutdown into a cancellation: cancelled servers
    leak sockets, whose warnings then land on whichever test happens to run next.
    """
    stop, stopped = trio.Event(), trio.Event()

    async def run(task_status: trio.TaskStatus[tuple[str, int]]) -> None:
        try:
            await serve(shutdown=stop, task_status=task_status)
        finally:
            stopped.set()

    async with trio.open_nursery() as nursery:
        address: tuple[str, int] = await nursery.start(run)
        try:
            yield address
        finally:
            stop.set()
            with trio.CancelScope(shield=True), trio.move_on_after(15):
                await stopped.wait()


@asynccontextmanager
async def running_simulator(config: SimulatorConfig | None = None) -> AsyncIterator[Sim]:
    serve = partial(run_simulator, config or SimulatorConfig(), "127.0.0.1", 0)
    async with _hosting(serve) as (host, port):
        yield Sim(f"http://{host}:{port}")


@asynccontextmanager
async def running_proxy(settings: Settings, *, grace: float = 5.0) -> AsyncIterator[str]:
    """Yields the proxy's base URL (without /v1)."""
    serve = partial(serve_app, create_app(settings), "127.0.0.1", 0, graceful_timeout=grace)
    async with _hosting(serve) as (host, port):
        try:
            yield f"http://{host}:{port}"
        finally:
            with trio.CancelScope(shield=True):
                while OPEN_CLIENTS:
                    await OPEN_CLIENTS.pop().close()


def proxy_settings(sim: Sim, **changes: Any) -> Settings:
    return Settings(anthropic_base_url=sim.url, anthropic_api_key=SIM_KEY).replace(**changes)


@asynccontextmanager
async def proxy_and_simulator(
    config: SimulatorConfig | None = None, **changes: Any
) -> AsyncIterator[tuple[str, Sim]]:
    async with (
        running_simulator(config) as sim,
        running_proxy(proxy_settings(sim, **changes)) as url,
    ):
        yield url, sim


@contextmanager
def no_collector_pauses() -> Iterator[None]:
    """The cyclic collector off for a block that is about timing.

    In a test the simulator, the proxy and the client share one process, so a collection
    of the test process's heap (which grows with every test module collected) stalls all
    three at once: the simulator then sends two tokens together, and a check that each
    token leaves on its own reads a stall of the test as a fault of the relay.
    """
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def free_port() -> int:
    """A loopback port nothing listens on now (for a server in another process)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without any trio-batcher setting, plus ``extra``: what a
    subprocess under test starts with."""
    env = {k: v for k, v in os.environ.items() if k not in {s.env for s in SPECS}}
    env.update(extra)
    return env
