"""Client key checks shared by the Quart routes and the ASGI chat endpoint."""

from __future__ import annotations

import hmac

from ..errors import ProxyError


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header value, or None."""
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def client_key(
    authorization: str | None, api_key: str | None = None, x_api_key: str | None = None
) -> str | None:
    """The key a client presented: ``Authorization: Bearer``, else ``api-key``, else ``x-api-key``.

    The OpenAI SDK and nearly every client send the bearer form; Azure-style OpenAI clients
    send ``api-key``, Anthropic-style ones ``x-api-key``. Accepting all three costs nothing
    and saves users of those clients from a 401 they cannot configure away.
    """
    token = bearer_token(authorization)
    if token is not None:
        return token
    for value in (api_key, x_api_key):
        if value is not None and value.strip():
            return value.strip()
    return None


def key_matches(token: str | None, keys: tuple[str, ...]) -> bool:
    """Constant-time comparison against every configured key (no early exit)."""
    supplied = (token or "").encode()
    matched = False
    for key in keys:
        matched |= hmac.compare_digest(supplied, key.encode())
    return matched and token is not None


def proxy_key_error() -> ProxyError:
    """The 401 for a ``/v1/`` request without one of ``PROXY_API_KEYS``."""
    return ProxyError(
        401,
        "Missing or invalid API key: send 'Authorization: Bearer <key>' (or an 'api-key' or "
        "'x-api-key' header) with one of the gateway's keys (PROXY_API_KEYS, or a tenant's "
        "in TENANTS_FILE).",
        type="authentication_error",
        code="invalid_api_key",
        headers={"WWW-Authenticate": "Bearer"},
    )
