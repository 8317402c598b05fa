"""Every route of Anthropic's API has a rule: served, owned, or refused with its reason.

A refused family (state Anthropic keeps under the gateway's one key, or the Admin API) is a
400 in the client's own dialect naming the feature and why, and never reaches the upstream;
an unknown path's 404 says it is no route the gateway serves.
"""

from __future__ import annotations

import re
from pathlib import Path

import httpx2
import pytest
from support import proxy_and_simulator

from trio_batcher.edge.api_routes import ROUTES, rule_for

DOCS = Path(__file__).resolve().parents[1] / "docs" / "compatibility.md"
ANTHROPIC = {"anthropic-version": "2023-06-01", "x-api-key": "sk-ant-client"}


def test_each_path_finds_its_family_by_whole_segments() -> None:
    assert rule_for("/v1/messages") == next(r for r in ROUTES if r.prefix == "/v1/messages")
    assert rule_for("/v1/messages/batches/msgbatch_1/results").prefix == "/v1/messages/batches"
    assert rule_for("/v1/messages/count_tokens").treatment == "served"
    assert rule_for("/v1/skills/skill_1/versions").treatment == "refused"
    assert rule_for("/v1/organizations/users").treatment == "refused"
    assert rule_for("/v1/skillsets") is None
    assert rule_for("/v2/messages") is None


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/skills"),
        ("POST", "/v1/agents"),
        ("GET", "/v1/sessions/sesn_1/events"),
        ("POST", "/v1/memory_stores"),
        ("GET", "/v1/organizations/api_keys"),
    ],
)
async def test_a_route_keeping_unscoped_state_is_refused_with_its_reason(
    method: str, path: str
) -> None:
    async with (
        proxy_and_simulator(metrics_enabled=True) as (url, sim),
        httpx2.AsyncClient() as http,
    ):
        answer = await http.request(method, f"{url}{path}", headers=ANTHROPIC, json={})
        assert answer.status_code == 400, answer.text
        error = answer.json()
        assert error["type"] == "error"
        assert error["error"]["type"] == "invalid_request_error"
        assert "is not relayed by this gateway" in error["error"]["message"]
        openai = await http.request(method, f"{url}{path}", json={})
        assert openai.status_code == 400
        assert openai.json()["error"]["code"] == "unsupported_by_gateway"
        assert await sim.received() == []
        rejected = (await http.get(f"{url}/metrics")).json()["rejected"]["by_reason"]
        assert rejected == {"unsupported_by_gateway": 2}


async def test_an_unknown_path_says_it_is_no_route_the_gateway_serves() -> None:
    async with proxy_and_simulator() as (url, sim), httpx2.AsyncClient() as http:
        answer = await http.get(f"{url}/v1/nonesuch", headers=ANTHROPIC)
        assert answer.status_code == 404
        message = answer.json()["error"]["message"]
        assert "no route of OpenAI's or Anthropic's APIs" in message
        assert await sim.received() == []


def test_the_compatibility_doc_lists_every_route_family_with_its_rule() -> None:
    text = DOCS.read_text()
    for rule in ROUTES:
        row = re.search(
            rf"^\| `{re.escape(rule.prefix)}` \|[^\n]*\| {rule.treatment} \|", text, re.M
        )
        assert row, f"docs/compatibility.md has no row for {rule.prefix} ({rule.treatment})"


@pytest.mark.parametrize(
    "container",
    [
        "container_011CQ",
        {"id": "container_011CQ"},
        {"skills": [{"type": "custom", "skill_id": "s"}]},
    ],
)
async def test_a_container_by_id_or_with_skills_is_refused_before_the_upstream(
    container: object,
) -> None:
    """A code execution container and skills live under the gateway's one key: naming one
    is refused with the reason, in Anthropic's shape, and never reaches the upstream."""
    body = {
        "model": "claude-sonnet-5-5",
        "max_tokens": 16,
        "messages": [{"role": "user", "content": "hi"}],
        "container": container,
    }
    async with proxy_and_simulator() as (url, sim), httpx2.AsyncClient() as http:
        answer = await http.post(f"{url}/v1/messages", headers=ANTHROPIC, json=body)
        assert answer.status_code == 400, answer.text
        error = answer.json()["error"]
        assert error["type"] == "invalid_request_error"
        assert "container" in error["message"] and "not relayed" in error["message"]
        assert await sim.received() == []


async def test_an_owned_object_whose_upstream_left_the_configuration_says_so(
    tmp_path: Path,
) -> None:
    """A batch and a file recorded on an upstream the gateway no longer sends them to (the
    upstreams file changed) are a 404 naming that upstream: no other organisation knows
    their ids, so they are never asked of the wrong one."""
    from support import proxy_settings, running_proxy, running_simulator

    from trio_batcher.store.deployment import deployment_of
    from trio_batcher.store.owned import OwnedObjects

    async with running_simulator() as sim:
        settings = proxy_settings(sim, data_dir=str(tmp_path))
        owned = OwnedObjects(tmp_path, deployment=deployment_of(settings))
        await owned.record("batch", "msgbatch_old", "", "retired")
        await owned.record("file", "file_old", "", "retired")
        await owned.aclose()
        async with running_proxy(settings) as url, httpx2.AsyncClient() as http:
            headers = {**ANTHROPIC, "anthropic-beta": "files-api-2025-04-14"}
            for path in ("/v1/messages/batches/msgbatch_old", "/v1/files/file_old"):
                answer = await http.get(f"{url}{path}", headers=headers)
                assert answer.status_code == 404, answer.text
                assert "'retired'" in answer.json()["error"]["message"]
            assert await sim.received() == []
