"""Google credentials for Vertex calls: Application Default Credentials, never on the loop.

google-auth's ``google.auth.default()`` finds what gcloud and Google's client libraries
find -- a service-account JSON named by ``GOOGLE_APPLICATION_CREDENTIALS`` (its JWT
assertion is exchanged at its ``token_uri``), workload identity federation, gcloud's user
credentials, the metadata server on GCE, GKE and Cloud Run -- and ``refresh()`` fetches
an OAuth access token over blocking HTTP. Here both run in a worker thread
(``_cached.CachedSecret``): the token is cached and refreshed five minutes before it
expires, one refresh at a time, and a request only ever waits for the one refresh its
token needs. The scope is ``cloud-platform``, as the SDK asks.

The token is never logged; a failure names the credentials' kind, not their content.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, Final, final

from ...errors import ProxyError
from ._cached import DEFAULT_EARLY_S, CachedSecret, Fetched

__all__ = ["CLOUD_PLATFORM_SCOPE", "GoogleCredentials"]

CLOUD_PLATFORM_SCOPE: Final = "https://www.googleapis.com/auth/cloud-platform"


def _load_default() -> Any:
    import google.auth

    credentials, _project = google.auth.default(scopes=[CLOUD_PLATFORM_SCOPE])
    return credentials


def _refresh(credentials: Any) -> None:
    from google.auth.transport.requests import Request

    credentials.refresh(Request())


@final
class GoogleCredentials:
    """The gateway's bearer token for one Vertex upstream.

    Args:
      load: returns google-auth credentials (blocking); ``None``: ADC with the
        ``cloud-platform`` scope. Tests pass credentials built from a file.
      refresh: refreshes them (blocking); ``None``: ``credentials.refresh(Request())``
        over ``requests``.
      early_s: refresh this long before expiry.
      run_sync: how blocking calls run (a worker thread; a plain call in tests).
    """

    def __init__(
        self,
        *,
        load: Callable[[], Any] | None = None,
        refresh: Callable[[Any], None] | None = None,
        early_s: float = DEFAULT_EARLY_S,
        run_sync: Callable[[Callable[[], Fetched[str]]], Awaitable[Fetched[str]]] | None = None,
    ) -> None:
        self._load = load or _load_default
        self._refresh = refresh or _refresh
        self._credentials: Any = None
        self._cache: CachedSecret[str] = CachedSecret(
            self._fetch, early_s=early_s, run_sync=run_sync
        )

    @property
    def cache(self) -> CachedSecret[str]:
        return self._cache

    async def token(self) -> str:
        """An access token valid for at least ``early_s`` more."""
        return await self._cache.get()

    async def headers(self) -> dict[str, str]:
        """``{"authorization": "Bearer <token>"}`` for a Vertex call.

        Raises:
          ProxyError: 502 ``upstream_credentials_error`` when no credentials are found or
            no token comes back; google-auth's own refresh errors propagate as raised.
        """
        return {"authorization": f"Bearer {await self.token()}"}

    def _fetch(self) -> Fetched[str]:
        """Runs in a worker thread: find the credentials once, then refresh them."""
        if self._credentials is None:
            try:
                self._credentials = self._load()
            except Exception as exc:
                if type(exc).__name__ != "DefaultCredentialsError":
                    raise
                raise ProxyError(
                    502,
                    "No Google Application Default Credentials were found "
                    "(GOOGLE_APPLICATION_CREDENTIALS, gcloud, the metadata server); the "
                    "gateway cannot authenticate its Vertex AI calls.",
                    type="upstream_error",
                    code="upstream_credentials_error",
                ) from None
        credentials = self._credentials
        self._refresh(credentials)
        token = credentials.token
        if not isinstance(token, str) or not token:
            raise ProxyError(
                502,
                f"Google credentials ({type(credentials).__name__}) gave no access token.",
                type="upstream_error",
                code="upstream_credentials_error",
            )
        expiry = credentials.expiry  # google-auth: a naive datetime in UTC, or None
        if not isinstance(expiry, datetime):
            return token, None
        if expiry.tzinfo is None:
            expiry = expiry.replace(tzinfo=UTC)
        return token, (expiry - datetime.now(UTC)).total_seconds()
