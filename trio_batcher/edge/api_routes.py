"""A rule for every route of Anthropic's API: relayed, relayed with ownership, or refused.

The gateway holds one upstream key (per upstream) for every tenant. Whatever Anthropic
keeps under that key -- a batch, a file, a thread, an agent, a session, a memory store --
would be visible to every tenant that can name its id if it were passed through as it is.
So no route is passed through by default: each family of the current API (read from the
official ``anthropic`` SDK's resources) has a rule here, and the 404 handler answers a path
by it (``rule_for``):

- **served**: the gateway governs the call (admission, tenants, metrics) and relays it;
- **owned**: relayed, every object recorded with its owner (``store.owned``);
- **refused**: a 400 in the client's dialect naming the feature and why -- state the
  gateway cannot scope per tenant yet, or an administration API that would act on the
  gateway's own organisation -- never an unscoped relay.

``docs/compatibility.md`` lists the same table (``tests/test_docs.py`` keeps them equal).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal, final

from ..errors import ProxyError

__all__ = ["ROUTES", "RouteRule", "moved_away", "rule_for"]

Treatment = Literal["served", "owned", "refused"]

_SERVER_STATE: Final = (
    "it keeps state at Anthropic under the gateway's one key, which every tenant would "
    "share; the gateway does not relay it until it can scope each object to its tenant"
)
_ADMIN: Final = (
    "it administers the organisation the gateway's key belongs to (an Admin API key's "
    "business), which no client of the gateway may act on"
)


@final
@dataclass(frozen=True, slots=True)
class RouteRule:
    """How the gateway treats one family of routes (``prefix`` and what is under it)."""

    prefix: str
    feature: str
    treatment: Treatment
    why: str = ""


ROUTES: Final[tuple[RouteRule, ...]] = (
    RouteRule("/v1/messages/count_tokens", "Token counting", "served"),
    RouteRule("/v1/messages/batches", "Message Batches", "owned"),
    RouteRule("/v1/messages", "Messages (with threads: owned)", "served"),
    RouteRule("/v1/models", "Models", "served"),
    RouteRule("/v1/files", "Files", "owned"),
    RouteRule("/v1/skills", "Skills", "refused", _SERVER_STATE),
    RouteRule("/v1/agents", "Managed agents", "refused", _SERVER_STATE),
    RouteRule("/v1/sessions", "Managed agent sessions", "refused", _SERVER_STATE),
    RouteRule("/v1/environments", "Environments", "refused", _SERVER_STATE),
    RouteRule("/v1/memory_stores", "Memory stores", "refused", _SERVER_STATE),
    RouteRule("/v1/vaults", "Vaults", "refused", _SERVER_STATE),
    RouteRule("/v1/deployments", "Deployments", "refused", _SERVER_STATE),
    RouteRule("/v1/deployment_runs", "Deployment runs", "refused", _SERVER_STATE),
    RouteRule("/v1/dreams", "Dreams", "refused", _SERVER_STATE),
    RouteRule("/v1/tunnels", "Tunnels", "refused", _SERVER_STATE),
    RouteRule("/v1/user_profiles", "User profiles", "refused", _SERVER_STATE),
    RouteRule("/v1/webhooks", "Webhooks", "refused", _SERVER_STATE),
    RouteRule("/v1/organizations", "The Admin API", "refused", _ADMIN),
    RouteRule("/v1/compliance", "The Compliance API", "refused", _ADMIN),
)


def rule_for(path: str) -> RouteRule | None:
    """The rule of the family ``path`` belongs to (the longest prefix that ends at a path
    segment), or None for a path that is not Anthropic's."""
    best: RouteRule | None = None
    for rule in ROUTES:
        if (path == rule.prefix or path.startswith(rule.prefix + "/")) and (
            best is None or len(rule.prefix) > len(best.prefix)
        ):
            best = rule
    return best


def moved_away(kind: str, object_id: str, upstream: str) -> ProxyError:
    """The 404 for an owned object whose upstream is no longer the one the gateway sends
    such objects to (the upstreams file changed): only the organisation that made it knows
    its id, so it cannot be reached through another."""
    return ProxyError(
        404,
        f"The {kind} {object_id} is held by the upstream {upstream!r}, which no longer "
        f"serves {kind}s on this gateway (UPSTREAMS_FILE changed); it cannot be reached "
        "through another upstream.",
        type="not_found_error",
    )
