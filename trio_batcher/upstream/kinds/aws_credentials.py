"""AWS credentials for signing Bedrock calls, from the standard chain, never on the loop.

botocore resolves the chain boto3 uses -- environment variables, the shared config and
credentials files (a ``profile``), web identity, container (ECS/EKS pod identity) and
instance (IMDS) roles -- and hands back *refreshable* credentials for the roles, whose
``get_frozen_credentials()`` may call STS or the metadata service: blocking HTTP. Here the
resolution and each refresh run in a worker thread (``_cached.CachedSecret``), the frozen
keys are cached, and they are refreshed five minutes before they expire, so no request is
signed with keys about to lapse and none waits on the metadata service but the one that
refreshes. Static keys (environment variables) never expire and are resolved once.

The keys are never logged or put in an error message: a failure names the profile only.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, NamedTuple, final

from ...errors import ProxyError
from ._cached import DEFAULT_EARLY_S, CachedSecret, Fetched

__all__ = ["AwsCredentials", "AwsKeys"]


@final
class AwsKeys(NamedTuple):
    """Frozen credentials: what ``bedrock.sign`` takes. ``repr`` hides the secrets."""

    access_key: str
    secret_key: str
    token: str | None

    def __repr__(self) -> str:
        return f"AwsKeys(access_key={self.access_key[:4]}..., secret_key=***, token=***)"


def _no_credentials(profile: str | None) -> ProxyError:
    where = f" for profile {profile!r}" if profile else ""
    return ProxyError(
        502,
        f"No AWS credentials were found{where} (environment, shared config, container or "
        "instance role); the gateway cannot sign its Bedrock calls.",
        type="upstream_error",
        code="upstream_credentials_error",
    )


@final
class AwsCredentials:
    """The gateway's AWS keys for one Bedrock upstream.

    Args:
      profile: a shared-config profile; ``None``: the default chain.
      session_factory: makes the botocore session (tests pass one with a fake provider);
        ``None``: ``botocore.session.Session(profile=profile)``.
      early_s: refresh this long before expiry.
      run_sync: how blocking calls run (a worker thread; a plain call in tests).
    """

    def __init__(
        self,
        profile: str | None = None,
        *,
        session_factory: Callable[[], Any] | None = None,
        early_s: float = DEFAULT_EARLY_S,
        run_sync: Callable[[Callable[[], Fetched[AwsKeys]]], Awaitable[Fetched[AwsKeys]]]
        | None = None,
    ) -> None:
        self._profile = profile
        self._session_factory = session_factory
        self._source: Any = None
        self._cache: CachedSecret[AwsKeys] = CachedSecret(
            self._fetch, early_s=early_s, run_sync=run_sync
        )

    @property
    def cache(self) -> CachedSecret[AwsKeys]:
        return self._cache

    async def get(self) -> AwsKeys:
        """Keys valid for at least ``early_s`` more.

        Raises:
          ProxyError: 502 ``upstream_credentials_error`` when the chain finds none; a
            provider's own error (STS refusing a role...) propagates as botocore raised it.
        """
        return await self._cache.get()

    def _fetch(self) -> Fetched[AwsKeys]:
        """Runs in a worker thread: resolve the chain once, then freeze (and so refresh)."""
        if self._source is None:
            if self._session_factory is not None:
                session = self._session_factory()
            else:
                from botocore.session import Session

                session = Session(profile=self._profile)
            source = session.get_credentials()
            if source is None:
                raise _no_credentials(self._profile)
            self._source = source
        frozen = self._source.get_frozen_credentials()
        if not frozen.access_key or not frozen.secret_key:
            raise _no_credentials(self._profile)
        keys = AwsKeys(frozen.access_key, frozen.secret_key, frozen.token or None)
        # RefreshableCredentials keeps its expiry as ``_expiry_time`` (botocore has no
        # public accessor); static credentials have none and never expire.
        expiry = getattr(self._source, "_expiry_time", None)
        if not isinstance(expiry, datetime):
            return keys, None
        if expiry.tzinfo is None:
            expiry = expiry.replace(tzinfo=UTC)
        return keys, (expiry - datetime.now(UTC)).total_seconds()
