"""The simulator's enforced rate limits, overload windows and transient (``times=N``) faults.

The bucket and schedule arithmetic is pure and tested as data with exact times; the live
tests prove the HTTP surface over loopback: statuses, ``retry-after`` and the
``anthropic-ratelimit-*`` headers a client (our proxy) reads.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from functools import partial
from typing import Any

import httpx2
import pytest
import trio

from trio_batcher.cli import _simulator_config, build_parser
from trio_batcher.simulator import SimulatorConfig, run_simulator
from trio_batcher.simulator.overload import OverloadSchedule
from trio_batcher.simulator.ratelimit import RateLimits, Refusal, TokenBucket, rfc3339

HEADERS = {"x-api-key": "sk-test", "anthropic-version": "2023-06-01"}
RESOURCES = ("requests", "tokens", "input-tokens", "output-tokens")


def ask(text: str = "Hello there, simulator", **changes: Any) -> dict[str, Any]:
    return {
        "model": "claude-haiku-4-5",
        "max_tokens": 256,
        "messages": [{"role": "user", "content": text}],
        **changes,
    }


@asynccontextmanager
async def simulator(config: SimulatorConfig) -> AsyncIterator[httpx2.AsyncClient]:
    """A simulator on loopback and a client for it, shut down gracefully at exit."""
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        host, port = await nursery.start(partial(run_simulator, config, shutdown=stop))
        try:
            async with httpx2.AsyncClient(base_url=f"http://{host}:{port}") as http:
                yield http
        finally:
            stop.set()


async def post(http: httpx2.AsyncClient, text: str = "Hello there, simulator") -> httpx2.Response:
    return await http.post("/v1/messages", json=ask(text), headers=HEADERS)


def remaining(response: httpx2.Response, resource: str) -> int:
    return int(response.headers[f"anthropic-ratelimit-{resource}-remaining"])


def reset_at(response: httpx2.Response, resource: str) -> float:
    return datetime.fromisoformat(
        response.headers[f"anthropic-ratelimit-{resource}-reset"]
    ).timestamp()


# --------------------------------------------------------------------------- pure arithmetic


def test_bucket_refills_continuously_from_the_last_charge() -> None:
    bucket = TokenBucket(6, 60.0)  # 0.1 a second
    assert bucket.level(123.0) == 6.0  # untouched: full whatever the time
    bucket.take(6, 10.0)
    assert bucket.level(10.0) == 0.0
    assert bucket.level(15.0) == pytest.approx(0.5)
    assert bucket.wait_for(1, 15.0) == pytest.approx(5.0)
    assert bucket.wait_for(1, 20.0) == 0.0
    assert bucket.until_full(10.0) == 60.0
    assert bucket.level(10_000.0) == 6.0  # never above capacity
    bucket.take(1, 20.0)  # level 1 - 1 = 0 at t=20
    assert bucket.until_full(20.0) == pytest.approx(60.0)
    bucket.reset()
    assert bucket.level(20.0) == 6.0


def test_waiting_exactly_the_computed_time_finds_room_despite_float_error() -> None:
    bucket = TokenBucket(3, 0.3)  # 10 a second; 0.1 s per unit is not exact in binary
    bucket.take(3, 0.0)
    assert bucket.wait_for(1, 0.1) == 0.0


def test_admission_needs_room_in_every_bucket_and_charges_nothing_when_refused() -> None:
    limits = RateLimits(requests=2, tokens=100, period_s=60.0)  # 2/60 req/s, 100/60 tok/s
    assert limits.admit(40, 0.0) is None
    assert limits.admit(40, 0.0) is None
    # Requests are out (1 unit in 30 s), tokens have 20 (40 needs 12 s): requests win.
    assert limits.admit(40, 0.0) == Refusal("requests", 2, 30)
    assert limits.requests is not None and limits.tokens is not None
    assert limits.requests.level(0.0) == 0.0 and limits.tokens.level(0.0) == 20.0
    # At t=30 a request fits again, and the tokens are back to 70: admitted.
    assert limits.admit(40, 30.0) is None
    # At t=31: requests 1/30, tokens 30 + 5/3; 40 tokens need (40 - 31.67) * 0.6 = 5 s,
    # the request (1 - 1/30) * 30 = 29 s: the retry-after is the longer, rounded up.
    assert limits.admit(40, 31.0) == Refusal("requests", 2, 29)


def test_a_request_costing_more_than_the_token_limit_waits_for_a_full_bucket() -> None:
    limits = RateLimits(requests=None, tokens=50, period_s=10.0)
    assert limits.admit(80, 0.0) is None  # charged 50, not 80: the bucket cannot go below 0
    assert limits.tokens is not None and limits.tokens.level(0.0) == 0.0
    assert limits.admit(80, 4.0) == Refusal("tokens", 50, 6)
    assert limits.admit(80, 10.0) is None


def test_headers_report_remaining_and_the_instant_the_bucket_is_full() -> None:
    limits = RateLimits(requests=4, tokens=1000, period_s=60.0)
    limits.admit(100, 5.0)
    headers = limits.headers(5.0, wall=1_000_000.0)
    assert headers["requests"] == (4, 3, rfc3339(1_000_015.0))  # 1 unit at 4/60 a second
    assert headers["tokens"] == (1000, 900, rfc3339(1_000_006.0))  # 100 at 1000/60
    assert headers["input-tokens"] == headers["output-tokens"] == headers["tokens"]
    assert RateLimits(requests=4, tokens=None, period_s=60.0).headers(0.0, 0.0).keys() == {
        "requests"
    }


def test_rfc3339_resets_have_milliseconds_and_are_never_early() -> None:
    assert rfc3339(0.0) == b"1970-01-01T00:00:00.000Z"
    assert rfc3339(1.0001) == b"1970-01-01T00:00:01.001Z"
    assert rfc3339(1_700_000_000.25) == b"2023-11-14T22:13:20.250Z"


def test_overload_windows_repeat_from_the_first_request() -> None:
    schedule = OverloadSchedule(every_s=10.0, for_s=2.5)
    assert schedule.remaining(100.0) == 2.5  # the epoch: the first window starts here
    assert schedule.retry_after(101.0) == 2  # 1.5 s left, rounded up
    assert schedule.retry_after(102.4) == 1  # 0.1 s left: at least 1
    assert schedule.retry_after(102.5) is None
    assert schedule.retry_after(109.9) is None
    assert schedule.retry_after(110.0) == 3  # the second window
    schedule.reset()
    assert schedule.retry_after(500.0) == 3  # a new epoch


def test_a_single_overload_window_and_no_overload() -> None:
    once = OverloadSchedule(every_s=0, for_s=1.0)
    assert once.retry_after(7.0) == 1
    assert once.retry_after(8.0) is None
    assert once.retry_after(1e6) is None
    never = OverloadSchedule(every_s=10.0, for_s=0)
    assert not never.enabled and never.retry_after(0.0) is None


@pytest.mark.parametrize(
    "changes",
    [
        {"rpm_limit": 0},
        {"tpm_limit": -5},
        {"ratelimit_period_s": 0},
        {"overload_for_s": -1},
        {"overload_every_s": 2, "overload_for_s": 2},
    ],
)
def test_bad_limits_are_refused(changes: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        SimulatorConfig(**changes)


def test_cli_flags_configure_the_new_modes() -> None:
    args = build_parser().parse_args(
        [
            "simulate",
            "--rpm-limit",
            "50",
            "--tpm-limit",
            "40000",
            "--ratelimit-period-s",
            "6",
            "--overload-every-s",
            "30",
            "--overload-for-s",
            "5",
        ]
    )
    config = _simulator_config(args, "")
    assert (config.rpm_limit, config.tpm_limit, config.ratelimit_period_s) == (50, 40000, 6.0)
    assert (config.overload_every_s, config.overload_for_s) == (30.0, 5.0)
    serve = build_parser().parse_args(["serve", "--simulate", "--sim-rpm-limit", "7"])
    assert _simulator_config(serve, "sim_").rpm_limit == 7
    with pytest.raises(SystemExit):
        _simulator_config(build_parser().parse_args(["simulate", "--rpm-limit", "0"]), "")


# --------------------------------------------------------------------------- over HTTP


# The live tests use long periods, so that the bucket barely refills while they run: the
# counts they assert hold however slowly a loaded machine serves the requests.


async def test_request_limit_counts_down_then_refuses_with_an_honest_retry_after() -> None:
    async with simulator(SimulatorConfig(rpm_limit=3, ratelimit_period_s=600)) as http:
        before = time.time()
        answers = [await post(http) for _ in range(3)]
        after = time.time()
        assert [r.status_code for r in answers] == [200, 200, 200]
        assert [remaining(r, "requests") for r in answers] == [2, 1, 0]
        assert all(r.headers["anthropic-ratelimit-requests-limit"] == "3" for r in answers)
        # Full again one period (600 s) after the first charge: the last answer's reset.
        assert before + 600 - 0.01 <= reset_at(answers[-1], "requests") <= after + 600 + 0.01

        refused = await post(http)
        assert refused.status_code == 429
        assert refused.json()["error"]["type"] == "rate_limit_error"
        assert "rate limit of 3 requests per 600 s" in refused.json()["error"]["message"]
        # One unit takes 200 s at 3 per 600 s; the wait is rounded up to whole seconds.
        assert refused.headers["retry-after"] == "200"
        assert remaining(refused, "requests") == 0
        # Token resources are not limited: they keep their plausible constants.
        assert remaining(answers[0], "tokens") == 2_400_000

        stats = (await http.get("/_sim/stats")).json()
        assert stats["by_status"] == {"200": 3, "429": 1}
        trace = stats["recent"][-1]
        assert (trace["fault"], trace["retry_after"]) == ("rate_limit", 200)

        await http.post("/_sim/reset")  # refills the buckets
        assert remaining(await post(http), "requests") == 2


async def test_token_limit_meters_input_plus_output_tokens() -> None:
    async with simulator(SimulatorConfig(tpm_limit=100, ratelimit_period_s=600)) as http:
        first = await post(http)
        usage = first.json()["usage"]
        cost = usage["input_tokens"] + usage["output_tokens"]
        assert 34 <= cost < 50  # so that exactly two requests fit in 100
        for resource in ("tokens", "input-tokens", "output-tokens"):
            assert first.headers[f"anthropic-ratelimit-{resource}-limit"] == "100"
            assert remaining(first, resource) == 100 - cost
        second = await post(http)
        assert remaining(second, "tokens") == 100 - 2 * cost
        refused = await post(http)
        assert refused.status_code == 429
        assert "100 input and output tokens per 600 s" in refused.json()["error"]["message"]
        # The bucket refills one token every 6 s; the refusal charged nothing.
        missing = cost - (100 - 2 * cost)
        assert int(refused.headers["retry-after"]) == missing * 6
        assert remaining(refused, "tokens") == 100 - 2 * cost


async def test_waiting_the_retry_after_is_enough() -> None:
    # 2 requests a second: a refusal says 1 s, and after 1 s there is room again.
    async with simulator(SimulatorConfig(rpm_limit=2, ratelimit_period_s=1.0)) as http:
        assert [(await post(http)).status_code for _ in range(2)] == [200, 200]
        refused = await post(http)
        assert (refused.status_code, refused.headers["retry-after"]) == (429, "1")
        await trio.sleep(1)
        assert (await post(http)).status_code == 200


async def test_overload_window_answers_529_until_it_ends() -> None:
    async with simulator(SimulatorConfig(overload_for_s=0.2)) as http:
        overloaded = await post(http)
        assert overloaded.status_code == 529
        assert overloaded.json()["error"]["type"] == "overloaded_error"
        assert overloaded.headers["retry-after"] == "1"  # 0.2 s left, in whole seconds
        await trio.sleep(1)
        assert (await post(http)).status_code == 200
        trace = (await http.get("/_sim/stats")).json()["recent"][0]
        assert (trace["fault"], trace["retry_after"]) == ("overload", 1)


async def test_times_faults_only_the_first_n_requests_carrying_the_directive() -> None:
    async with simulator(SimulatorConfig()) as http:
        directive = "[[sim:status=529,retry_after=1,times=2]]"
        statuses = [(await post(http, f"try {directive}")).status_code for _ in range(3)]
        assert statuses == [529, 529, 200]
        # Another directive -- here only its tag differs -- has its own count.
        tagged = "[[sim:status=529,retry_after=1,times=2,tag=b]]"
        assert (await post(http, tagged)).status_code == 529
        # A reset forgets every count; the header form is the same directive.
        await http.post("/_sim/reset")
        fault = {**HEADERS, "x-sim-fault": "times=2,status=529,retry_after=1"}
        statuses = [
            (await http.post("/v1/messages", json=ask(), headers=fault)).status_code
            for _ in range(3)
        ]
        assert statuses == [529, 529, 200]
        recent = (await http.get("/_sim/stats")).json()["recent"]
        assert [t["fault"] for t in recent] == [
            "status=529,retry_after=1,times=2",
            "status=529,retry_after=1,times=2",
            None,
        ]


async def test_times_applies_to_stream_errors_too() -> None:
    async with simulator(SimulatorConfig()) as http:
        body = ask("[[sim:stream_error_first=1,times=1]]", stream=True)
        first = await http.post("/v1/messages", json=body, headers=HEADERS)
        assert first.text.startswith("event: error")
        second = await http.post("/v1/messages", json=body, headers=HEADERS)
        assert second.text.startswith("event: message_start")
        assert "event: message_stop" in second.text


async def test_a_request_refused_before_faults_apply_does_not_use_up_a_times_directive() -> None:
    async with simulator(SimulatorConfig(overload_for_s=0.2)) as http:
        text = "[[sim:status=500,times=1]]"
        assert (await post(http, text)).status_code == 529  # the overload window
        await trio.sleep(1)
        assert (await post(http, text)).status_code == 500  # the directive, unused so far
        assert (await post(http, text)).status_code == 200


async def test_429_without_retry_after_on_request() -> None:
    async with simulator(SimulatorConfig()) as http:
        response = await post(http, "[[sim:status=429,no_retry_after=1]]")
        assert response.status_code == 429
        assert "retry-after" not in response.headers
        trace = (await http.get("/_sim/stats")).json()["recent"][0]
        assert trace["retry_after"] is None
        default = await post(http, "[[sim:status=429]]")
        assert default.headers["retry-after"] == "1"
        assert (await http.get("/_sim/stats")).json()["recent"][1]["retry_after"] == 1.0


async def test_every_response_carries_all_ratelimit_headers() -> None:
    async with simulator(SimulatorConfig(rpm_limit=10, tpm_limit=10_000)) as http:
        message = await post(http)
        models = await http.get("/v1/models", headers=HEADERS)
        for response in (message, models):
            for resource in RESOURCES:
                for field in ("limit", "remaining", "reset"):
                    assert f"anthropic-ratelimit-{resource}-{field}" in response.headers
        # Models calls are not metered: the request bucket shows only the message.
        assert remaining(models, "requests") == 9
