"""Bearer-token checks shared by the Quart routes and the ASGI chat endpoint."""

from __future__ import annotations

import hmac

from .errors import ProxyError


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header value, or None."""
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


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
        "Missing or invalid API key: send 'Authorization: Bearer <key>' with one of "
        "the keys in PROXY_API_KEYS.",
        type="authentication_error",
        code="invalid_api_key",
        headers={"WWW-Authenticate": "Bearer"},
    )
