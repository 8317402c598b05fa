"""Per-tenant token buckets on trio's clock, to the exact virtual second: bursts, refill,
the wait a refusal names, estimates corrected by actual usage, refunds and reloads."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from trio_batcher.tenants import Charge, Limited, Tenant, TenantRateLimits, TokenBucket


@pytest.fixture
def autojump_clock() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0)


def charged(result: Charge | Limited) -> Charge:
    assert isinstance(result, Charge), result
    return result


def refused(result: Charge | Limited | None) -> Limited:
    assert isinstance(result, Limited), result
    return result


async def test_a_full_minute_bursts_then_requests_go_at_the_limits_pace(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limits = TenantRateLimits()
    tenant = Tenant(name="a", rpm=60)  # one request a second
    for _ in range(60):
        charged(limits.try_charge(tenant))
    limited = refused(limits.try_charge(tenant))
    assert (limited.tenant, limited.limit, limited.per_minute) == ("a", "rpm", 60)
    assert limited.retry_after_s == 1.0
    assert limited.retry_after_header == "1"
    await trio.sleep(0.5)
    assert refused(limits.check(tenant)).retry_after_s == 0.5
    await trio.sleep(0.5)
    assert trio.current_time() == 1.0
    assert limits.check(tenant) is None
    charged(limits.try_charge(tenant))
    assert refused(limits.check(tenant)).retry_after_s == 1.0


async def test_a_refusal_takes_nothing(autojump_clock: trio.testing.MockClock) -> None:
    limits = TenantRateLimits()
    tenant = Tenant(name="a", rpm=60, tpm=600)
    charged(limits.try_charge(tenant, 600))
    refused(limits.try_charge(tenant, 100))  # tokens refuse: the request is not taken either
    assert limits.level("a", "rpm") == 59.0
    assert limits.level("a", "tpm") == 0.0


async def test_the_longer_wait_names_the_limit(autojump_clock: trio.testing.MockClock) -> None:
    limits = TenantRateLimits()
    tenant = Tenant(name="a", rpm=60, tpm=600)  # 1 request/s, 10 tokens/s
    for _ in range(60):
        charged(limits.try_charge(tenant, 10))
    both = refused(limits.check(tenant, 50))  # rpm: 1 s; tpm: 50 tokens at 10/s, 5 s
    assert (both.limit, both.retry_after_s) == ("tpm", 5.0)
    assert both.message == (
        "Rate limit of tenant 'a' reached: 600 tokens per minute (tpm); retry in 5 s."
    )
    just_requests = refused(limits.check(tenant, 0))
    assert (just_requests.limit, just_requests.retry_after_s) == ("rpm", 1.0)


async def test_an_overestimate_is_given_back_and_an_underestimate_becomes_debt(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limits = TenantRateLimits()
    tenant = Tenant(name="a", tpm=600)  # 10 tokens a second
    first = charged(limits.try_charge(tenant, 500))
    assert limits.level("a", "tpm") == 100.0
    first.settle(200)  # used less than estimated
    assert limits.level("a", "tpm") == 400.0
    second = charged(limits.try_charge(tenant, 400))
    second.settle(900)  # used more: the bucket goes 500 into debt
    assert limits.level("a", "tpm") == -500.0
    assert refused(limits.check(tenant, 1)).retry_after_s == 50.1
    await trio.sleep(50)
    assert limits.level("a", "tpm") == 0.0
    await trio.sleep(0.1)
    assert limits.check(tenant, 1) is None


async def test_settle_follows_the_running_total_and_the_last_call_wins(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limits = TenantRateLimits()
    tenant = Tenant(name="a", tpm=6000)
    charge = charged(limits.try_charge(tenant, 1000))
    for total in (100, 700, 1500):  # usage as a stream reports it
        charge.settle(total)
    assert charge.tokens_charged == 1500
    assert limits.level("a", "tpm") == 4500.0


async def test_a_refund_gives_back_the_request_and_its_tokens(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limits = TenantRateLimits()
    tenant = Tenant(name="a", rpm=1, tpm=100)
    charge = charged(limits.try_charge(tenant, 80))
    refused(limits.try_charge(tenant, 10))
    charge.refund()
    assert limits.level("a", "rpm") == 1.0 and limits.level("a", "tpm") == 100.0
    charge.settle(500)  # after a refund, nothing more is charged
    charge.refund()
    assert limits.level("a", "tpm") == 100.0
    charged(limits.try_charge(tenant, 10))


async def test_a_request_larger_than_the_bucket_needs_a_full_bucket_then_leaves_debt(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limits = TenantRateLimits()
    tenant = Tenant(name="a", tpm=60)  # 1 token a second
    charged(limits.try_charge(tenant, 90))
    assert limits.level("a", "tpm") == -30.0
    assert refused(limits.check(tenant, 90)).retry_after_s == 90.0  # back to full: 60 + 30 s
    await trio.sleep(90)
    charged(limits.try_charge(tenant, 90))


async def test_a_tenant_without_limits_is_never_refused_and_its_charge_is_inert(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limits = TenantRateLimits()
    tenant = Tenant(name="free")
    for _ in range(1000):
        charge = charged(limits.try_charge(tenant, 10**9))
        charge.settle(10**10)
        charge.refund()
    assert limits.level("free", "rpm") is None and limits.level("free", "tpm") is None


async def test_tenants_have_buckets_of_their_own(autojump_clock: trio.testing.MockClock) -> None:
    limits = TenantRateLimits()
    a, b = Tenant(name="a", rpm=1), Tenant(name="b", rpm=1)
    charged(limits.try_charge(a))
    refused(limits.try_charge(a))
    charged(limits.try_charge(b))


async def test_a_changed_limit_keeps_the_level_capped_at_the_new_size(
    autojump_clock: trio.testing.MockClock,
) -> None:
    limits = TenantRateLimits()
    old = Tenant(name="a", rpm=120)
    charged(limits.try_charge(old))
    charge = charged(limits.try_charge(old))
    assert limits.level("a", "rpm") == 118.0
    smaller = Tenant(name="a", rpm=60)  # after a reload
    assert limits.check(smaller) is None
    assert limits.level("a", "rpm") == 60.0
    charge.refund()  # a charge from before the reload settles into the same bucket
    assert limits.level("a", "rpm") == 60.0
    for _ in range(60):
        charged(limits.try_charge(smaller))
    assert refused(limits.check(smaller)).retry_after_s == 1.0
    limits.prune(["someone-else"])
    assert limits.level("a", "rpm") is None
    assert limits.check(smaller) is None  # a fresh, full bucket


def test_a_bucket_is_plain_arithmetic_on_explicit_times() -> None:
    bucket = TokenBucket(30, now=100.0)  # 0.5 a second
    bucket.take(30, 100.0)
    assert bucket.level(100.0) == 0.0
    assert bucket.wait_for(1, 100.0) == 2.0
    assert bucket.level(101.0) == 0.5
    assert bucket.level(1000.0) == 30.0  # never more than its size
    bucket.take(-100, 1000.0)
    assert bucket.level(1000.0) == 30.0
    assert bucket.level(99.0) == 30.0  # a time before the last update changes nothing


def test_retry_after_is_rounded_up_to_whole_seconds() -> None:
    assert Limited("a", "rpm", 60, 0.2).retry_after_header == "1"
    assert Limited("a", "rpm", 60, 1.0).retry_after_header == "1"
    assert Limited("a", "rpm", 60, 1.01).retry_after_header == "2"
    assert Limited("a", "tpm", 60, 59.5).retry_after_header == "60"
