"""``GET /v1/models``: the upstream's list in OpenAI's shape, cached, with a bundled fallback."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import httpx2
import openai
import pytest
import trio
import trio.testing
from support import openai_client, proxy_and_simulator

from trio_batcher.edge.models import (
    FRESH_FOR_S,
    KNOWN_MODELS,
    RETRY_AFTER_FAILURE_S,
    ModelCatalogue,
    find_model,
    from_anthropic,
    list_models,
)
from trio_batcher.errors import ProxyError
from trio_batcher.simulator import SimulatorConfig
from trio_batcher.simulator.models import CATALOGUE


def _info(model_id: str, created_at: str = "2026-02-17T00:00:00Z") -> dict[str, Any]:
    return {"type": "model", "id": model_id, "display_name": model_id, "created_at": created_at}


def test_dated_ids_are_listed_after_their_alias_once() -> None:
    listed = from_anthropic(
        [
            _info("claude-sonnet-5", "2026-09-30T00:00:00Z"),
            _info("claude-haiku-4-5-20251001", "2025-10-15T00:00:00Z"),
            _info("claude-haiku-4-5-20251101", "2025-11-01T00:00:00Z"),
            {"id": 7},
            _info("claude-odd", "not a date"),
        ]
    )
    assert listed == (
        ("claude-sonnet-5", 1790726400),
        ("claude-haiku-4-5", 1760486400),
        ("claude-haiku-4-5-20251001", 1760486400),
        ("claude-haiku-4-5-20251101", 1761955200),
        ("claude-odd", 0),
    )


def test_the_default_model_comes_first_with_its_dated_ids() -> None:
    listed = from_anthropic(
        [
            _info("claude-sonnet-5"),
            _info("claude-haiku-4-5-20251001"),
            _info("claude-sonnet-4-5-20250929"),
        ]
    )
    ids = [m["id"] for m in list_models("claude-sonnet-4-5", listed)["data"]]
    assert ids == [
        "claude-sonnet-4-5",
        "claude-sonnet-4-5-20250929",
        "claude-sonnet-5",
        "claude-haiku-4-5",
        "claude-haiku-4-5-20251001",
    ]
    # A default named by its dated id comes first alone; its alias keeps its place.
    ids = [m["id"] for m in list_models("claude-haiku-4-5-20251001", listed)["data"]]
    assert ids[:3] == ["claude-haiku-4-5-20251001", "claude-sonnet-5", "claude-haiku-4-5"]


def test_find_model_knows_dated_forms_and_the_default_alias() -> None:
    models = (("claude-sonnet-4-5", 1759104000), ("claude-opus-5", 1790726400))
    dated = find_model("claude-sonnet-4-5-20250929", "claude-opus-5", models)
    assert dated == {
        "id": "claude-sonnet-4-5-20250929",
        "object": "model",
        "created": 1759104000,
        "owned_by": "anthropic",
    }
    default = find_model("default", "claude-opus-5", models)
    assert default is not None and (default["id"], default["created"]) == ("default", 1790726400)
    assert find_model("gpt-4o", "claude-opus-5", models) is None
    assert find_model("claude-sonnet-4-5-2025", "claude-opus-5", models) is None
    assert find_model("claude-sonnet-4-5-20250929-20250929", "claude-opus-5", models) is None
    # Once the list names a model's real dated ids, only those are found.
    upstream = (*models, ("claude-sonnet-4-5-20250929", 1759104000))
    assert find_model("claude-sonnet-4-5-20250929", "claude-opus-5", upstream) is not None
    assert find_model("claude-sonnet-4-5-20991231", "claude-opus-5", upstream) is None


class _FakeUpstream:
    def __init__(self) -> None:
        self.calls = 0
        self.fail = False
        self.models: list[dict[str, Any]] = [_info("claude-sonnet-5")]

    async def fetch(self) -> Sequence[Mapping[str, Any]]:
        self.calls += 1
        await trio.sleep(1)
        if self.fail:
            raise ProxyError(401, "invalid x-api-key")
        return self.models


async def test_the_catalogue_fetches_once_for_concurrent_askers_and_caches(
    autojump_clock: trio.testing.MockClock,
) -> None:
    upstream = _FakeUpstream()
    catalogue = ModelCatalogue(upstream.fetch)
    results: list[tuple[tuple[str, int], ...]] = []

    async def ask() -> None:
        results.append(await catalogue.models())

    async with trio.open_nursery() as nursery:
        for _ in range(5):
            nursery.start_soon(ask)
    assert upstream.calls == 1
    assert {r[0][0] for r in results} == {"claude-sonnet-5"}
    assert catalogue.source == "upstream"

    await trio.sleep(FRESH_FOR_S - 2)
    await catalogue.models()
    assert upstream.calls == 1
    await trio.sleep(2)
    upstream.models = [_info("claude-opus-6")]
    assert (await catalogue.models())[0][0] == "claude-opus-6"
    assert upstream.calls == 2


async def test_a_failed_fetch_answers_with_what_it_had_and_waits_before_asking_again(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    upstream = _FakeUpstream()
    upstream.fail = True
    catalogue = ModelCatalogue(upstream.fetch)
    assert await catalogue.models() == KNOWN_MODELS
    assert "listing the upstream's models failed (invalid x-api-key)" in caplog.text
    await trio.sleep(RETRY_AFTER_FAILURE_S - 2)
    assert await catalogue.models() == KNOWN_MODELS
    assert upstream.calls == 1

    await trio.sleep(2)
    upstream.fail = False
    assert (await catalogue.models())[0][0] == "claude-sonnet-5"  # recovered
    assert upstream.calls == 2

    await trio.sleep(FRESH_FOR_S)
    upstream.fail = True
    assert (await catalogue.models())[0][0] == "claude-sonnet-5"  # the last good list


async def test_the_gateway_lists_what_the_upstream_lists() -> None:
    async with proxy_and_simulator(default_model="claude-haiku-4-5") as (url, _sim):
        client = openai_client(url)
        ids = [m.id async for m in client.models.list()]
        assert ids[0] == "claude-haiku-4-5"
        for entry in CATALOGUE:
            assert entry[0] in ids
        assert "claude-sonnet-4-5" in ids  # the alias of a dated id
        dated = await client.models.retrieve("claude-sonnet-4-5-20250929")
        assert dated.created == 1759104000
        assert (await client.models.retrieve("default")).id == "default"
        with pytest.raises(openai.NotFoundError):
            await client.models.retrieve("gpt-4o")


async def test_without_a_usable_upstream_list_the_bundled_one_is_served() -> None:
    keyed = SimulatorConfig(api_keys=frozenset({"the-simulators-key"}))
    async with proxy_and_simulator(keyed, default_model="claude-opus-5-5") as (url, _sim):
        client = openai_client(url)
        ids = [m.id async for m in client.models.list()]
        assert ids == [model_id for model_id, _ in KNOWN_MODELS]


@pytest.mark.parametrize("upstream_lists", [True, False], ids=["upstream_list", "bundled_list"])
async def test_claude_codes_default_model_is_listed_and_priced(upstream_lists: bool) -> None:
    # Claude Code 2.1.328 asks for claude-opus-5-5 unless told otherwise; a keyed simulator
    # refuses the gateway's list request, so the bundled list answers instead.
    config = None if upstream_lists else SimulatorConfig(api_keys=frozenset({"sim-key"}))
    async with proxy_and_simulator(config, metrics_enabled=True) as (url, _sim):
        client = openai_client(url)
        ids = [m.id async for m in client.models.list()]
        assert "claude-opus-5-5" in ids
        assert ids[0] == "claude-sonnet-5-5"  # DEFAULT_MODEL, first: a current model too
        if upstream_lists:
            reply = await client.chat.completions.create(
                model="claude-opus-5-5", messages=[{"role": "user", "content": "hi"}]
            )
            assert reply.usage is not None
            async with httpx2.AsyncClient() as http:
                metrics = (await http.get(f"{url}/metrics")).json()
            opus = metrics["by_model"]["claude-opus-5-5"]
            assert opus["priced"] is True and metrics["cost"]["estimate_complete"] is True
            # $4 per million input tokens, $20 per million output (Claude Code's own table)
            expected = (opus["input_tokens"] * 4 + opus["output_tokens"] * 20) / 1_000_000
            assert opus["cost_usd"] == pytest.approx(expected, rel=1e-9)
            assert expected > 0
