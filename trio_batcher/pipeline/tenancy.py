"""What a tenant may use, checked before its request is admitted, and charged after.

Theory of operation
-------------------
The edge has found the tenant (the presented key's digest in the ``TenantDirectory``);
``TenantGuard.admit`` then decides, synchronously and before the admission gate, in the
order a client can act on:

1. **model**: a tenant limited to some models gets 403 for the others;
2. **budget**: a tenant whose spend in its period has reached ``budget_usd`` gets 429
   ``insufficient_quota`` (OpenAI's code; an Anthropic client reads ``rate_limit_error``)
   with ``Retry-After`` at the period's next change and ``x-should-retry: false``, since
   the SDKs' few quick retries cannot succeed;
3. **rate limits**: the request and its estimated tokens are taken from the tenant's
   buckets (``rpm`` / ``tpm``); a refusal is 429 with ``Retry-After`` and the limit named,
   and takes nothing.

With ``REDIS_URL`` (``shared``: ``cluster.tenant_buckets.SharedTenantLimits``) the budget and
the rate limits are the cluster's: after the ledger's check from memory, the request
reserves its estimated cost from the tenant's budget slice and takes its request and
tokens from its rate slices, leased from Redis (a round trip only when a slice runs short).

Each of these is answered before any upstream call and counted under ``shed`` with the
tenant. What passes gets a ``TenantGrant``: its ``share`` is what the fair gate schedules
by, and ``settle(model, usage)`` is called wherever the request's usage becomes known
(a reply, a stream's end, a stream cut short): the token bucket moves from the estimate
to the actual count and the cost is added to the tenant's spend. ``refund()`` gives the
buckets back for a request that never reached the upstream (shed by the gate or by a
cooldown). Both are idempotent per grant.

The estimate is ``token_estimate.tokens_for`` (four characters a token, the simulator's
rule too) over the body sent upstream -- input only, since output is unknown until it is
produced; the bucket then runs into debt by the output, which holds the tenant's next
requests back by that much.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any, Final, Protocol, final

from ..admission.gate import TenantShare
from ..errors import ProxyError
from ..observatory.pricing import PriceTable, TokenUsage
from ..tenants import ANONYMOUS, Limited, OverBudget, Tenant, TenantRateLimits
from ..token_estimate import tokens_for
from ..upstream.request import UpstreamRequest

__all__ = ["Budgets", "TenantGrant", "TenantGuard"]

# Shed reasons of this module, as /metrics counts them.
RATE_LIMITED: Final = "rate_limited"
INSUFFICIENT_QUOTA: Final = "insufficient_quota"
MODEL_NOT_ALLOWED: Final = "model_not_allowed"


class RateCharge(Protocol):
    """A request's rate-limit charge: ``tenants.Charge``, or a shared one."""

    def settle(self, actual_tokens: int) -> None: ...

    def refund(self) -> None: ...


class SharedCharge(RateCharge, Protocol):
    """A charge from the cluster's slices: it settles the budget's reservation too."""

    def settle_cost(self, usd: float) -> None: ...


class SharedLimits(Protocol):
    """What the guard needs of the cluster's tenant limits
    (``cluster.tenant_buckets.SharedTenantLimits``)."""

    async def admit(
        self, tenant: Tenant, estimate_tokens: int, estimate_usd: float
    ) -> SharedCharge | Limited | OverBudget: ...


class Budgets(Protocol):
    """What the guard needs of the spend ledger (``tenants.SpendLedger``)."""

    def over_budget(self, tenant: Tenant) -> OverBudget | None: ...

    def charge(self, tenant: str, usd: float) -> None: ...


@final
class TenantGrant:
    """One admitted request's tenant: its gate share, and its charges to settle."""

    __slots__ = ("_budgets", "_charge", "_pricing", "_settled", "_shared", "name", "share")

    def __init__(
        self,
        name: str,
        share: TenantShare,
        charge: RateCharge | None,
        budgets: Budgets | None,
        pricing: PriceTable | None,
        shared: SharedCharge | None = None,
    ) -> None:
        self.name = name
        self.share = share
        self._charge = charge
        self._budgets = budgets
        self._pricing = pricing
        self._shared = shared
        self._settled = False

    def settle(
        self,
        model: str,
        usage: Mapping[str, Any] | None,
        *,
        upstream: str | None = None,
        price_factor: Decimal | None = None,
    ) -> None:
        """The request's usage is known (or it ended without any): charge the actual
        tokens and their cost, at the prices of the ``upstream`` that served it where the
        price table gives it its own (the figure the observatory counts), times
        ``price_factor`` when it was served at a discount (a flex request's Message
        Batch). Once per grant."""
        if self._settled:
            return
        self._settled = True
        tokens = TokenUsage.from_anthropic(usage or {})
        if self._charge is not None:
            self._charge.settle(
                tokens.input + tokens.output + tokens.cache_read + tokens.cache_write
            )
        cost = None
        if self._pricing is not None and usage:
            cost = self._pricing.cost(model, tokens, upstream=upstream)
            if cost is not None and price_factor is not None:
                cost *= price_factor
        if self._budgets is not None and cost:
            self._budgets.charge(self.name, float(cost))
        if self._shared is not None:  # the budget's reservation becomes the real cost
            self._shared.settle_cost(float(cost or 0))

    def refund(self) -> None:
        """The request never reached the upstream: its rate-limit charge goes back."""
        if self._settled:
            return
        self._settled = True
        if self._charge is not None:
            self._charge.refund()


@final
class TenantGuard:
    """Per-tenant model, budget and rate checks (see the module docstring).

    Args:
      limits: every tenant's request and token buckets.
      budgets: the spend ledger; ``None`` when no tenant has a budget to enforce.
      pricing: the price table that turns usage into spend.
      on_refused: told of every refusal (tenant name, shed reason), for the metrics.
    """

    def __init__(
        self,
        limits: TenantRateLimits,
        budgets: Budgets | None,
        pricing: PriceTable | None,
        on_refused: Callable[[str, str], None] | None = None,
        shared: SharedLimits | None = None,
    ) -> None:
        self._limits = limits
        self.shared = shared
        # Assignable: the ledger exists once the app has loaded what was spent.
        self.budgets = budgets
        self._pricing = pricing
        self._on_refused = on_refused
        # One share object per tenant version: the gate compares it by identity first.
        self._shares: dict[str, tuple[Tenant, TenantShare]] = {}

    def check_budget(self, tenant: Tenant) -> None:
        """Raise 429 ``insufficient_quota`` if ``tenant`` has spent its budget: before a
        request, and before a batch is accepted (its spend comes later, on delivery)."""
        budgets = self.budgets
        if budgets is not None and tenant.budget is not None:
            over = budgets.over_budget(tenant)
            if over is not None:
                raise self._over_budget(over)

    def _over_budget(self, over: OverBudget) -> ProxyError:
        self._refused(over.tenant, INSUFFICIENT_QUOTA)
        return ProxyError(
            429,
            over.message,
            type=INSUFFICIENT_QUOTA,
            code=INSUFFICIENT_QUOTA,
            headers={"Retry-After": over.retry_after_header, "x-should-retry": "false"},
        )

    def _rate_limited(self, limited: Limited) -> ProxyError:
        self._refused(limited.tenant, RATE_LIMITED)
        return ProxyError(
            429,
            limited.message,
            type="tokens" if limited.limit == "tpm" else "requests",
            code="rate_limit_exceeded",
            headers={"Retry-After": limited.retry_after_header},
        )

    async def admit(self, tenant: Tenant, request: UpstreamRequest) -> TenantGrant:
        """Check ``tenant`` may send ``request`` now, and charge its buckets.

        Raises:
          ProxyError: 403 for a model the tenant may not use, 429 over budget or over a
            rate limit; nothing is charged then.
        """
        if not tenant.allows_model(request.model):
            self._refused(tenant.name, MODEL_NOT_ALLOWED)
            raise ProxyError(
                403,
                f"Tenant '{tenant.name}' may not use the model '{request.model}'.",
                type="permission_error",
                param="model",
                code=MODEL_NOT_ALLOWED,
            )
        self.check_budget(tenant)
        budgets = self.budgets
        charge: RateCharge | None = None
        shared_charge: SharedCharge | None = None
        if self.shared is not None and (tenant.rate_limited or tenant.budget is not None):
            estimate = _estimate(request)
            cost = None
            if tenant.budget is not None and self._pricing is not None:
                cost = self._pricing.cost(request.model, TokenUsage(input=estimate))
            taken = await self.shared.admit(tenant, estimate, float(cost or 0))
            if isinstance(taken, OverBudget):
                raise self._over_budget(taken)
            if isinstance(taken, Limited):
                raise self._rate_limited(taken)
            charge = shared_charge = taken
        elif tenant.rate_limited:
            local = self._limits.try_charge(tenant, _estimate(request))
            if isinstance(local, Limited):
                raise self._rate_limited(local)
            charge = local
        # Every named tenant's spend is kept (a budget added later counts the period so
        # far); the anonymous caller of a gateway without keys writes nothing to disk.
        if tenant.name == ANONYMOUS and tenant.budget is None:
            budgets = None
        return TenantGrant(
            tenant.name, self._share(tenant), charge, budgets, self._pricing, shared_charge
        )

    def _share(self, tenant: Tenant) -> TenantShare:
        known = self._shares.get(tenant.name)
        if known is not None and known[0] is tenant:
            return known[1]
        share = TenantShare(
            tenant.name,
            weight=tenant.weight,
            max_inflight=tenant.max_inflight,
            max_queue=tenant.max_queue,
        )
        self._shares[tenant.name] = (tenant, share)
        return share

    def _refused(self, tenant: str, reason: str) -> None:
        if self._on_refused is not None:
            self._on_refused(tenant, reason)


def _estimate(request: UpstreamRequest) -> int:
    """Input tokens, four characters a token, over what goes upstream."""
    if request.content is not None:
        return tokens_for(len(request.content))
    return tokens_for(len(json.dumps(request.body, ensure_ascii=False)))
