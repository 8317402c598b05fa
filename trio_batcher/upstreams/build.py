"""From upstream specs to stewards: each kind's client, credentials, pool and resilience.

The one place that knows which client serves which kind: an anthropic upstream gets an
``upstream.client.UpstreamClient`` with the key its ``api_key_env`` names; a bedrock one a
``BedrockClient`` signing with the standard AWS chain (its ``profile``); a vertex one a
``VertexClient`` with Application Default Credentials. The cloud SDKs are imported only
here, and only for a kind the file names (``upstream.kinds.require_extra`` checked at start).

Each upstream gets its own ``Resilience`` (cooldowns, retry budget, and, with
``BATCH_ADAPTIVE`` and a ``max_concurrency``, an AIMD limit on its own cap): one upstream's
529 storm must not slow the others. A gateway without ``UPSTREAMS_FILE`` keeps the one
client and resilience it always had (the runtime passes them in).

``primary_settings`` answers what the stateful parts need one answer to: the Batch API's
Message Batches and the deployment's identity (``store.deployment``) belong to the first
anthropic upstream of the file, the one a gateway without the file has always used.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import replace
from typing import Final

import trio

from ..settings import Settings
from ..upstream.caller import MessagesCaller
from ..upstream.client import UpstreamClient
from ..upstream.pool import UpstreamPool
from ..upstream.resilience import Resilience, ResilienceConfig
from .config import AnthropicAccess, BedrockAccess, UpstreamsFileError, UpstreamSpec, VertexAccess
from .steward import Steward

__all__ = ["build_steward", "check_credentials", "primary_settings"]

_CONNECT_TIMEOUT_S: Final = 10.0


def check_credentials(specs: Sequence[UpstreamSpec], source: str) -> None:
    """Refuse at start an anthropic upstream whose key variable is unset or empty (the
    variable is named, its value never shown). The clouds' chains are resolved at the
    first call, as their SDKs do: a role may only be reachable from where the gateway runs.

    Raises:
      UpstreamsFileError: naming each upstream whose key is missing.
    """
    problems = [
        f"upstream {spec.name!r}: api_key_env: the environment variable "
        f"{spec.access.api_key_env} is not set (or empty); set it to this upstream's key"
        for spec in specs
        if isinstance(spec.access, AnthropicAccess) and not os.environ.get(spec.access.api_key_env)
    ]
    if problems:
        raise UpstreamsFileError(source, problems)


def primary_settings(settings: Settings, specs: Sequence[UpstreamSpec]) -> Settings:
    """``settings`` as the stateful parts see them: ``ANTHROPIC_BASE_URL`` and the key of
    the file's first anthropic upstream (unchanged without a file).

    A file of clouds only has no such upstream, and its state must still be its own: two
    gateways on one host in front of different Bedrock regions must not share their
    stored responses and files. Unless ``DEPLOYMENT_ID`` names one, its deployment is then
    named by what it fronts: a digest of its upstreams' kinds, regions, projects, profiles
    and endpoints (``store.deployment``)."""
    if settings.upstreams_file is None:
        return settings
    for spec in specs:
        if isinstance(spec.access, AnthropicAccess):
            return replace(
                settings,
                anthropic_base_url=spec.access.base_url,
                anthropic_api_key=os.environ.get(spec.access.api_key_env) or None,
            )
    if settings.deployment_id:
        return settings
    fronted = "\n".join(sorted(repr(spec.access) for spec in specs))
    digest = hashlib.sha256(fronted.encode()).hexdigest()[:16]
    return replace(settings, deployment_id=f"clouds-{digest}")


def build_steward(spec: UpstreamSpec, index: int, settings: Settings) -> Steward:
    """A steward for ``spec``, with its own client, pool and resilience."""
    caller = _caller(spec, settings)
    limiter = None
    adaptive = settings.batch_adaptive and spec.max_concurrency is not None
    config = ResilienceConfig(
        max_retries=settings.upstream_max_retries,
        max_wait_s=settings.upstream_retry_max_wait_s,
        budget_ratio=settings.retry_budget_ratio,
        coordinated=settings.upstream_coordinated_backoff,
        adaptive=adaptive,
    )
    if spec.max_concurrency is not None:
        limiter = trio.CapacityLimiter(spec.max_concurrency)
    resilience = Resilience(config, limiter=limiter if adaptive else None)
    return Steward(spec, caller, resilience, index=index, limiter=limiter)


def _caller(spec: UpstreamSpec, settings: Settings) -> MessagesCaller:
    access = spec.access
    if isinstance(access, AnthropicAccess):
        pool = UpstreamPool(access.base_url, connect_timeout=_CONNECT_TIMEOUT_S)
        key = os.environ.get(access.api_key_env) or None
        return UpstreamClient(replace(settings, anthropic_api_key=key), pool)
    if isinstance(access, BedrockAccess):
        from ..upstream.kinds import AwsCredentials, BedrockTarget
        from ..upstream.kinds.bedrock_client import BedrockClient

        return BedrockClient.for_target(
            BedrockTarget(access.region, access.base_url), AwsCredentials(access.profile)
        )
    assert isinstance(access, VertexAccess)
    from ..upstream.kinds import GoogleCredentials, VertexTarget
    from ..upstream.kinds.vertex_client import VertexClient

    return VertexClient.for_target(
        VertexTarget(access.project, access.region, access.base_url), GoogleCredentials()
    )
