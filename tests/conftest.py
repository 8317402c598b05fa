from __future__ import annotations

import gc
import logging
from collections.abc import AsyncIterator, Iterator

import closing_streams
import pytest
from redis_support import RedisServer, open_test_link, running_redis, unique_prefix

from trio_batcher.cluster import RedisLink

closing_streams.install()

# The outbound client logs every request at INFO; keep test output readable.
for _name in ("httpx", "httpx2", "httpcore", "httpcore2"):
    logging.getLogger(_name).setLevel(logging.WARNING)


@pytest.fixture
def anyio_backend() -> str:
    return "trio"


@pytest.fixture(autouse=True)
def _data_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test's embedded state (stored Responses) in a directory of its own, never in
    the user's ``~/.local/share``; subprocesses inherit it through the environment."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path_factory.mktemp("xdg-data")))


# -- a real redis-server, for the shared-state tests (tests/redis_support.py) ----------------


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    with running_redis() as server:
        yield server


@pytest.fixture
async def two_links(redis_server: RedisServer) -> AsyncIterator[tuple[RedisLink, RedisLink]]:
    """Two instances' links to one Redis, under a prefix of their own."""
    prefix = unique_prefix()
    async with (
        open_test_link(redis_server.url, prefix) as a,
        open_test_link(redis_server.url, prefix) as b,
    ):
        yield a, b
    gc.collect()  # coredis leaves refused connections' buffers to the collector
