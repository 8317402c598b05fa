"""Several simulated upstreams (``simulator/fleet.py``) and overload on demand
(``POST /_sim/overload``).

The overload's timing is checked in process under ``autojump_clock`` (Quart's test client:
no socket, so the clock jumps only when the app sleeps); its wire formats and the fleet over
real loopback, the cloud wires with the ``anthropic`` SDK's own ``AnthropicBedrock`` and
``AnthropicVertex`` clients configured from nothing but the generated upstreams file and
environment -- the standard credential chains, as a gateway finds them.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import cache, partial
from pathlib import Path
from typing import Any, TypeVar

import anthropic
import httpx2
import pytest
import trio

from trio_batcher.simulator import SimulatorConfig, create_simulator_app
from trio_batcher.simulator.cloud_models import bedrock_model, vertex_model
from trio_batcher.simulator.fleet import (
    SIM_KEY_ENV,
    CloudIdentity,
    SimulatedFleet,
    SimulatedUpstream,
    parse_kinds,
    prepare_environment,
    run_simulated_upstreams,
)
from trio_batcher.simulator.fleet_cli import adopt_environment, env_file_text
from trio_batcher.simulator.overload import OverloadOnDemand
from trio_batcher.upstreams.config import (
    BedrockAccess,
    UpstreamSpec,
    VertexAccess,
    parse_upstreams,
    read_upstreams_file,
)

T = TypeVar("T")

HEADERS = {"x-api-key": "sk-ant-any", "anthropic-version": "2023-06-01"}
ASK: dict[str, Any] = {
    "model": "claude-sonnet-4-5",
    "max_tokens": 32,
    "messages": [{"role": "user", "content": "Hello there"}],
}
# What could make a client find credentials other than the fleet's.
FOREIGN_ENV = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_BEARER_TOKEN_BEDROCK",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "CLOUD_ML_REGION",
    "ANTHROPIC_VERTEX_PROJECT_ID",
    "ANTHROPIC_BEDROCK_BASE_URL",
    "ANTHROPIC_VERTEX_BASE_URL",
)


@cache
def identity() -> CloudIdentity:
    """One identity for every fleet of this module: the SDK's Bedrock client keeps the
    session it made from the environment for the life of the process (keyed on its
    arguments, all unset here), so a second identity would go unseen by it."""
    return CloudIdentity.generate(vertex_key=True)


@asynccontextmanager
async def running_fleet(
    kinds: list[str], config: SimulatorConfig | None = None
) -> AsyncIterator[SimulatedFleet]:
    """A fleet on loopback, stopped gracefully when the block ends."""
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        fleet: SimulatedFleet = await nursery.start(
            partial(
                run_simulated_upstreams,
                kinds,
                config or SimulatorConfig(),
                shutdown=stop,
                identity=identity(),
            )
        )
        try:
            yield fleet
        finally:
            stop.set()


async def in_thread(fn: Callable[[], T]) -> T:
    """A blocking SDK call off the trio thread (the simulators run on it)."""
    return await trio.to_thread.run_sync(fn)


async def overload(upstream: SimulatedUpstream, **body: Any) -> dict[str, Any]:
    async with httpx2.AsyncClient() as http:
        response = await http.post(upstream.overload_url, json=body)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


async def end_overload(upstream: SimulatedUpstream) -> dict[str, Any]:
    async with httpx2.AsyncClient() as http:
        response = await http.delete(upstream.overload_url)
    assert response.status_code == 200
    answer: dict[str, Any] = response.json()
    return answer


async def ask_anthropic(upstream: SimulatedUpstream) -> httpx2.Response:
    async with httpx2.AsyncClient() as http:
        return await http.post(f"{upstream.base_url}/v1/messages", json=ASK, headers=HEADERS)


def by_name(fleet: SimulatedFleet, name: str) -> SimulatedUpstream:
    (found,) = [u for u in fleet.upstreams if u.name == name]
    return found


def adopt_only(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> None:
    """This process's environment with the fleet's credentials and no others."""
    for name in FOREIGN_ENV:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)


# ---------------------------------------------------------------- overload on demand


def test_on_demand_overload_runs_for_its_time_and_stops_early() -> None:
    demand = OverloadOnDemand()
    assert demand.snapshot(0.0) == {
        "active": False,
        "remaining_s": 0.0,
        "status": 529,
        "retry_after": True,
    }
    demand.start(100.0, 2.5, 503)
    assert demand.remaining(101.0) == 1.5 and demand.retry_after(101.0) == 2
    assert demand.retry_after(102.4) == 1
    assert demand.snapshot(101.0) == {
        "active": True,
        "remaining_s": 1.5,
        "status": 503,
        "retry_after": True,
    }
    assert demand.remaining(102.5) is None
    assert demand.snapshot(103.0) == {
        "active": False,
        "remaining_s": 0.0,
        "status": 503,
        "retry_after": True,
    }
    demand.start(200.0, 60.0)
    demand.start(210.0, 5.0, 429)  # a new overload replaces the running one
    assert (demand.remaining(214.0), demand.status) == (1.0, 429)
    demand.stop()
    assert demand.remaining(211.0) is None
    for for_s, status in ((0.0, 529), (-1.0, 529), (float("inf"), 529), (1.0, 404)):
        with pytest.raises(ValueError):
            demand.start(0.0, for_s, status)


async def test_on_demand_overload_ends_after_for_s_on_trio_s_clock(
    autojump_clock: trio.abc.Clock,
) -> None:
    app = create_simulator_app(SimulatorConfig())
    async with app.test_app() as test_app:
        client = test_app.test_client()
        started = await client.post("/_sim/overload", json={"for_s": 10})
        assert await started.get_json() == {
            "active": True,
            "remaining_s": 10.0,
            "status": 529,
            "retry_after": True,
        }
        first = await client.post("/v1/messages", json=ASK, headers=HEADERS)
        assert (first.status_code, first.headers["retry-after"]) == (529, "10")
        await trio.sleep(9.5)
        late = await client.post("/v1/messages", json=ASK, headers=HEADERS)
        assert (late.status_code, late.headers["retry-after"]) == (529, "1")
        state = await (await client.get("/_sim/overload")).get_json()
        assert state == {"active": True, "remaining_s": 0.5, "status": 529, "retry_after": True}
        await trio.sleep(0.5)
        assert (await client.post("/v1/messages", json=ASK, headers=HEADERS)).status_code == 200
        ended = await (await client.get("/_sim/overload")).get_json()
        assert ended == {"active": False, "remaining_s": 0.0, "status": 529, "retry_after": True}
        stats = await (await client.get("/_sim/stats")).get_json()
        assert stats["by_status"] == {"200": 1, "529": 2}
        assert [t["fault"] for t in stats["recent"]] == ["overload", "overload", None]
        assert [t["retry_after"] for t in stats["recent"][:2]] == [10, 1]


async def test_delete_ends_the_overload_and_reset_does_too(autojump_clock: trio.abc.Clock) -> None:
    app = create_simulator_app(SimulatorConfig())
    async with app.test_app() as test_app:
        client = test_app.test_client()
        await client.post("/_sim/overload", json={"for_s": 600, "status": 429})
        refused = await client.post("/v1/messages", json=ASK, headers=HEADERS)
        assert refused.status_code == 429
        assert (await refused.get_json())["error"]["type"] == "rate_limit_error"
        assert refused.headers["retry-after"] == "600"
        ended = await client.delete("/_sim/overload")
        assert await ended.get_json() == {
            "active": False,
            "remaining_s": 0.0,
            "status": 429,
            "retry_after": True,
        }
        assert (await client.post("/v1/messages", json=ASK, headers=HEADERS)).status_code == 200
        await client.post("/_sim/overload", json={"for_s": 600, "status": 500})
        failed = await client.post("/v1/messages", json=ASK, headers=HEADERS)
        assert failed.status_code == 500 and "retry-after" not in failed.headers
        await client.post("/_sim/reset")
        assert (await client.post("/v1/messages", json=ASK, headers=HEADERS)).status_code == 200


async def test_an_overload_without_retry_after_refuses_without_one_and_says_so(
    autojump_clock: trio.abc.Clock,
) -> None:
    """Anthropic's own 529s usually say nothing about when to come back; a gateway must then
    rely on its own back-off, and a bench must be able to reproduce that storm."""
    app = create_simulator_app(SimulatorConfig())
    async with app.test_app() as test_app:
        client = test_app.test_client()
        started = await client.post("/_sim/overload", json={"for_s": 10, "retry_after": False})
        assert await started.get_json() == {
            "active": True,
            "remaining_s": 10.0,
            "status": 529,
            "retry_after": False,
        }
        refused = await client.post("/v1/messages", json=ASK, headers=HEADERS)
        assert refused.status_code == 529 and "retry-after" not in refused.headers
        assert (await refused.get_json())["error"]["type"] == "overloaded_error"
        await client.post("/_sim/overload", json={"for_s": 10, "status": 429, "retry_after": False})
        limited = await client.post("/v1/messages", json=ASK, headers=HEADERS)
        assert limited.status_code == 429 and "retry-after" not in limited.headers
        state = await (await client.get("/_sim/overload")).get_json()
        assert (state["status"], state["retry_after"]) == (429, False)
        await trio.sleep(10)
        ended = await (await client.get("/_sim/overload")).get_json()
        assert ended == {"active": False, "remaining_s": 0.0, "status": 429, "retry_after": False}
        assert (await client.post("/v1/messages", json=ASK, headers=HEADERS)).status_code == 200
        stats = await (await client.get("/_sim/stats")).get_json()
        assert [t["fault"] for t in stats["recent"]] == ["overload", "overload", None]
        assert [t["retry_after"] for t in stats["recent"]] == [None, None, None]
        # The default comes back with the next overload that does not say otherwise.
        await client.post("/_sim/overload", json={"for_s": 5})
        again = await client.post("/v1/messages", json=ASK, headers=HEADERS)
        assert (again.status_code, again.headers["retry-after"]) == (529, "5")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "for_s"),
        ({"for_s": 0}, "for_s"),
        ({"for_s": -3}, "for_s"),
        ({"for_s": "10"}, "for_s"),
        ({"for_s": True}, "for_s"),
        ({"for_s": 5, "status": 404}, "status"),
        ({"for_s": 5, "status": "529"}, "status"),
        ({"for_s": 5, "retry_after": "no"}, "retry_after"),
        ({"for_s": 5, "retry_after": 0}, "retry_after"),
        ({"for_s": 5, "retry_after": None}, "retry_after"),
        ({"for_s": 5, "until": 9}, "until"),
        ([5], "body"),
    ],
)
async def test_a_bad_overload_body_is_a_400_naming_the_field(body: Any, field: str) -> None:
    app = create_simulator_app(SimulatorConfig())
    async with app.test_app() as test_app:
        client = test_app.test_client()
        refused = await client.post("/_sim/overload", json=body)
        assert refused.status_code == 400
        error = (await refused.get_json())["error"]
        assert error["type"] == "invalid_request_error" and error["message"].startswith(field)
        state = await (await client.get("/_sim/overload")).get_json()
        assert state["active"] is False


# ---------------------------------------------------------------- the fleet


async def test_each_simulator_of_a_fleet_is_overloaded_alone() -> None:
    async with running_fleet(["anthropic", "anthropic", "bedrock"]) as fleet:
        names = [u.name for u in fleet.upstreams]
        assert names == ["sim-anthropic-1", "sim-anthropic-2", "sim-bedrock-1"]
        assert len({u.root for u in fleet.upstreams}) == 3
        first, second = fleet.upstreams[:2]
        assert (await overload(first, for_s=60))["active"] is True
        refused = await ask_anthropic(first)
        assert refused.status_code == 529
        assert refused.json()["error"]["type"] == "overloaded_error"
        assert refused.headers["retry-after"] == "60"
        assert (await ask_anthropic(second)).status_code == 200
        async with httpx2.AsyncClient() as http:
            other = (await http.get(second.overload_url)).json()
            counted = (await http.get(f"{first.root}/_sim/stats")).json()
        assert other == {"active": False, "remaining_s": 0.0, "status": 529, "retry_after": True}
        assert counted["by_status"] == {"529": 1}
        assert (await end_overload(first))["active"] is False
        assert (await ask_anthropic(first)).status_code == 200


async def test_an_overload_ends_by_itself_over_loopback() -> None:
    async with running_fleet(["anthropic"]) as fleet:
        (upstream,) = fleet.upstreams
        await overload(upstream, for_s=0.2)
        assert (await ask_anthropic(upstream)).status_code == 529
        with trio.fail_after(10):
            while True:
                if (await ask_anthropic(upstream)).status_code == 200:
                    break
                await trio.sleep(0.05)


def test_the_upstreams_file_describes_every_simulator(tmp_path: Path) -> None:
    identity = CloudIdentity.generate(vertex_key=False)
    fleet = SimulatedFleet(
        (
            SimulatedUpstream("sim-anthropic-1", "anthropic", "http://127.0.0.1:9001"),
            SimulatedUpstream("sim-bedrock-1", "bedrock", "http://127.0.0.1:9002"),
            SimulatedUpstream("sim-vertex-1", "vertex", "http://127.0.0.1:9003"),
            SimulatedUpstream("sim-bedrock-2", "bedrock", "http://127.0.0.1:9004"),
        ),
        identity,
    )
    text = fleet.upstreams_toml()
    specs = parse_upstreams(text)
    assert [(s.name, s.kind) for s in specs] == [(u.name, u.kind) for u in fleet.upstreams]
    assert {(s.weight, s.priority) for s in specs} == {(1, 0)}
    assert identity.aws_secret_access_key not in text and "SECRET" not in text
    anthropic_spec, bedrock_spec, vertex_spec, _ = specs
    assert anthropic_spec.access == type(anthropic_spec.access)(
        api_key_env=SIM_KEY_ENV, base_url="http://127.0.0.1:9001"
    )
    assert bedrock_spec.access == BedrockAccess("us-east-1", None, "http://127.0.0.1:9002")
    assert vertex_spec.access == VertexAccess(
        "simulated-project", "us-east5", "http://127.0.0.1:9003/v1"
    )
    # Every model the simulator lists, by its id and its undated alias, maps to an id the
    # simulated cloud takes for that same model.
    assert bedrock_spec.model_id("claude-sonnet-4-5") == (
        "anthropic.claude-sonnet-4-5-20250929-v1:0"
    )
    assert vertex_spec.model_id("claude-sonnet-4-5") == "claude-sonnet-4-5@20250929"
    assert vertex_spec.model_id("claude-opus-5-5") == "claude-opus-5-5"
    for spec, to_anthropic in ((bedrock_spec, bedrock_model), (vertex_spec, vertex_model)):
        assert len(spec.models) == 13
        for name, cloud_id in spec.models.items():
            assert to_anthropic(cloud_id) is not None
            assert to_anthropic(cloud_id) == name or to_anthropic(cloud_id).startswith(name + "-")


def test_kinds_are_checked() -> None:
    assert parse_kinds("anthropic, bedrock,anthropic") == ("anthropic", "bedrock", "anthropic")
    with pytest.raises(ValueError, match="unknown upstream kind 'azure'"):
        parse_kinds("anthropic,azure")
    with pytest.raises(ValueError, match="comma-separated"):
        parse_kinds("")


async def test_the_environment_names_the_upstreams_file_and_private_credentials(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running_fleet(["anthropic", "bedrock", "vertex"]) as fleet:
        env = prepare_environment(fleet, tmp_path)
        identity = fleet.identity
        assert set(env) == {
            "UPSTREAMS_FILE",
            SIM_KEY_ENV,
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_REGION",
            "GOOGLE_APPLICATION_CREDENTIALS",
        }
        specs = read_upstreams_file(env["UPSTREAMS_FILE"])
        assert [s.name for s in specs] == [u.name for u in fleet.upstreams]
        assert env["AWS_ACCESS_KEY_ID"] == identity.aws_access_key_id
        assert env["AWS_REGION"] == identity.aws_region
        account = private_json(Path(env["GOOGLE_APPLICATION_CREDENTIALS"]))
        assert account["token_uri"] == f"{by_name(fleet, 'sim-vertex-1').root}/token"
        assert account["client_email"] == identity.vertex_client_email
        # The identity's repr and the shell file's header show no secret.
        assert identity.aws_secret_access_key not in repr(identity)
        assert "PRIVATE KEY" not in repr(identity)
        text = env_file_text(env)
        assert "unset AWS_PROFILE AWS_SESSION_TOKEN" in text
        # Adopting it drops what would sign as someone else.
        monkeypatch.setenv("AWS_PROFILE", "prod")
        monkeypatch.setenv("AWS_SESSION_TOKEN", "not-the-simulated-one")
        for name in env:
            monkeypatch.setenv(name, os.environ.get(name, ""))  # restored after the test
        adopt_environment(env)
        assert "AWS_PROFILE" not in os.environ and "AWS_SESSION_TOKEN" not in os.environ
        assert os.environ["UPSTREAMS_FILE"] == env["UPSTREAMS_FILE"]


def private_json(path: Path) -> Any:
    """The JSON in ``path``, after checking that only its owner may read it."""
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    return json.loads(path.read_text())


def _cloud_clients(
    specs: tuple[UpstreamSpec, ...],
) -> tuple[anthropic.AnthropicBedrock, anthropic.AnthropicVertex]:
    """The SDK's cloud clients, configured from the upstreams file alone: no key, no
    credentials passed, so each finds them through its standard chain."""
    bedrock_spec = next(s for s in specs if s.kind == "bedrock")
    vertex_spec = next(s for s in specs if s.kind == "vertex")
    assert isinstance(bedrock_spec.access, BedrockAccess)
    assert isinstance(vertex_spec.access, VertexAccess)
    bedrock = anthropic.AnthropicBedrock(base_url=bedrock_spec.access.base_url, max_retries=0)
    vertex = anthropic.AnthropicVertex(
        region=vertex_spec.access.region,
        project_id=vertex_spec.access.project,
        base_url=vertex_spec.access.base_url,
        max_retries=0,
    )
    return bedrock, vertex


async def test_sdk_cloud_clients_use_the_fleet_through_its_environment_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running_fleet(["bedrock", "vertex", "vertex"]) as fleet:
        env = prepare_environment(fleet, tmp_path)
        adopt_only(monkeypatch, env)
        specs = read_upstreams_file(env["UPSTREAMS_FILE"])
        bedrock, vertex = _cloud_clients(specs)
        on_bedrock = specs[0].model_id("claude-sonnet-4-5")
        on_vertex = specs[1].model_id("claude-sonnet-4-5")
        assert on_bedrock is not None and on_vertex is not None
        messages = [{"role": "user", "content": "Hello"}]
        with bedrock, vertex:
            reply = await in_thread(
                lambda: bedrock.messages.create(
                    model=on_bedrock,
                    max_tokens=32,
                    messages=messages,  # type: ignore[arg-type]
                )
            )
            assert reply.content[0].type == "text"
            replied = await in_thread(
                lambda: vertex.messages.create(
                    model=on_vertex,
                    max_tokens=32,
                    messages=messages,  # type: ignore[arg-type]
                )
            )
            assert replied.model == "claude-sonnet-4-5-20250929"
        # The second Vertex accepts the token the first one's endpoint issued: one store.
        second = fleet.upstreams[2]
        other = anthropic.AnthropicVertex(
            region=specs[2].access.region,  # type: ignore[union-attr]
            project_id=specs[2].access.project,  # type: ignore[union-attr]
            base_url=second.base_url,
            max_retries=0,
        )
        with other:
            assert (
                await in_thread(
                    lambda: other.messages.create(
                        model=on_vertex,
                        max_tokens=32,
                        messages=messages,  # type: ignore[arg-type]
                    )
                )
            ).content
        async with httpx2.AsyncClient() as http:
            received = (await http.get(f"{second.root}/_sim/requests")).json()["requests"]
        assert [r["path"].rsplit(":", 1)[-1] for r in received] == ["rawPredict"]


async def test_overload_on_demand_speaks_each_cloud_s_wire(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running_fleet(["bedrock", "vertex"]) as fleet:
        env = prepare_environment(fleet, tmp_path)
        adopt_only(monkeypatch, env)
        specs = read_upstreams_file(env["UPSTREAMS_FILE"])
        bedrock_upstream, vertex_upstream = fleet.upstreams
        bedrock, vertex = _cloud_clients(specs)
        on_bedrock = specs[0].model_id("claude-haiku-4-5")
        on_vertex = specs[1].model_id("claude-haiku-4-5")
        messages = [{"role": "user", "content": "Hello"}]

        def ask_bedrock() -> Any:
            return bedrock.messages.create(model=on_bedrock, max_tokens=16, messages=messages)  # type: ignore[arg-type]

        def ask_vertex() -> Any:
            return vertex.messages.create(model=on_vertex, max_tokens=16, messages=messages)  # type: ignore[arg-type]

        with bedrock, vertex:
            await overload(bedrock_upstream, for_s=60)
            with pytest.raises(anthropic.APIStatusError) as on_bedrock_error:
                await in_thread(ask_bedrock)
            response = on_bedrock_error.value.response
            assert response.status_code == 503
            assert response.headers["x-amzn-ErrorType"] == "ServiceUnavailableException"
            assert response.json() == {"message": "Bedrock is unable to process your request."}
            assert "retry-after" not in response.headers
            # The other cloud is not overloaded.
            assert (await in_thread(ask_vertex)).content

            await overload(vertex_upstream, for_s=60)
            with pytest.raises(anthropic.APIStatusError) as on_vertex_error:
                await in_thread(ask_vertex)
            response = on_vertex_error.value.response
            assert response.status_code == 529
            assert response.json()["error"]["type"] == "overloaded_error"
            assert response.headers["retry-after"] == "60"
            await overload(vertex_upstream, for_s=60, retry_after=False)
            with pytest.raises(anthropic.APIStatusError) as silent:
                await in_thread(ask_vertex)
            assert silent.value.response.status_code == 529
            assert silent.value.response.json()["error"]["type"] == "overloaded_error"
            assert "retry-after" not in silent.value.response.headers
            await overload(bedrock_upstream, for_s=60, retry_after=False)
            with pytest.raises(anthropic.APIStatusError) as still_bedrock:
                await in_thread(ask_bedrock)
            assert still_bedrock.value.response.status_code == 503
            assert "retry-after" not in still_bedrock.value.response.headers
            await overload(vertex_upstream, for_s=60, status=503)
            with pytest.raises(anthropic.APIStatusError) as unavailable:
                await in_thread(ask_vertex)
            error = unavailable.value.response.json()["error"]
            assert (unavailable.value.status_code, error["status"]) == (503, "UNAVAILABLE")
            await overload(bedrock_upstream, for_s=60, status=429)
            with pytest.raises(anthropic.RateLimitError) as throttled:
                await in_thread(ask_bedrock)
            assert throttled.value.response.headers["x-amzn-ErrorType"] == "ThrottlingException"

            await end_overload(bedrock_upstream)
            await end_overload(vertex_upstream)
            assert (await in_thread(ask_bedrock)).content
            assert (await in_thread(ask_vertex)).content
