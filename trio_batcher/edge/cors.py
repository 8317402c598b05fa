"""Which web pages may call the gateway: CORS for the origins listed, 403 for the rest.

Why: a browser lets any page send a "simple" cross-origin POST (``text/plain`` body, no
custom headers) without asking first; it only hides the answer from the page. A gateway on
``localhost`` with no ``PROXY_API_KEYS`` would therefore spend its upstream key on behalf of
any site its user happens to visit. Browsers put an ``Origin`` header on every such request
(and on every ``POST``, same-origin included) while command-line clients and SDKs send
none, so the rule is cheap and breaks no real client: a request that names an origin must
name one in ``CORS_ALLOW_ORIGINS``, and is otherwise answered 403 before anything else runs
-- no upstream call.

There is deliberately no "same origin as the gateway" exemption: the gateway cannot tell
its own name from the ``Host`` header, which a DNS-rebinding page controls (it resolves its
own domain to 127.0.0.1, and its requests are then same-origin). The gateway's own pages
only ever ``GET``, which browsers send without ``Origin`` when same-origin, so they need no
exemption; a chat page served from the gateway's host by a reverse proxy lists its origin.

The same list turns on CORS proper for browser-based chat clients: preflights are answered
here, and answers carry ``Access-Control-Allow-Origin`` with every header exposed (and
``Vary: Origin`` on every answer, so no shared cache mixes them). No credentials mode:
keys travel in ``Authorization``, which a preflight allows like any other header, so
cookies and ``Access-Control-Allow-Credentials`` are never involved.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Final, final

from ..errors import ProxyError
from ..translation.anthropic_messages import error_reply as anthropic_error_reply
from .http import (
    ASGIApp,
    Message,
    Receive,
    Scope,
    Send,
    header_value,
    send_json,
    speaks_anthropic,
)

ALLOW_METHODS: Final = b"GET, POST, OPTIONS"
PREFLIGHT_MAX_AGE_S: Final = 600

_PREFLIGHT_VARY: Final = b"Origin, Access-Control-Request-Method, Access-Control-Request-Headers"


def origin_not_allowed(origin: str) -> ProxyError:
    shown = origin if origin.isascii() and origin.isprintable() else ascii(origin)
    return ProxyError(
        403,
        f"Requests from the web origin {shown} are not allowed. To let a browser page call "
        "this gateway, list its origin in CORS_ALLOW_ORIGINS.",
        type="permission_error",
        code="origin_not_allowed",
    )


@final
class OriginPolicy:
    """ASGI middleware in front of the whole app.

    Args:
      inner: the app (its lifespan and every route).
      allow_origins: ``CORS_ALLOW_ORIGINS``: exact origins (``https://chat.example.com``),
        ``null`` for pages with an opaque origin, or ``*`` for any page.
      on_refused: called for each request refused (the app counts it as rejected).
    """

    def __init__(
        self,
        inner: ASGIApp,
        allow_origins: Iterable[str],
        on_refused: Callable[[], None] = lambda: None,
    ) -> None:
        self._inner = inner
        self._on_refused = on_refused
        origins = frozenset(allow_origins)
        self._cors = bool(origins)
        self._any = "*" in origins
        self._origins = frozenset(o.lower() for o in origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._inner(scope, receive, send)
            return
        origin = request_method = request_headers = None
        for name, value in scope["headers"]:
            if name == b"origin":
                # Browsers send one; two can only be forged, and the layers behind would
                # not agree on which one counts: refused as a whole.
                origin = value if origin is None else b"(several Origin headers)"
            elif name == b"access-control-request-method":
                request_method = value
            elif name == b"access-control-request-headers":
                request_headers = value
        if origin is None:
            await self._inner(scope, receive, self._vary(send) if self._cors else send)
            return
        origin_text = origin.decode("latin-1")
        if not self._allows(origin_text):
            self._on_refused()
            exc = origin_not_allowed(origin_text)
            # Readable by the page, so its developer sees why rather than a bare CORS failure.
            headers = {"Access-Control-Allow-Origin": origin_text, "Vary": "Origin"}
            if speaks_anthropic(scope):
                status, body, extra = anthropic_error_reply(exc)
                await send_json(send, body, status, {**extra, **headers})
            else:
                await send_json(send, exc.body(), exc.status, headers)
            return
        allow_origin = b"*" if self._any else origin
        if scope["method"] == "OPTIONS" and request_method is not None:
            await _send_preflight(send, allow_origin, request_headers)
            return

        async def send_with_cors(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [
                    *message.get("headers", ()),
                    (b"access-control-allow-origin", allow_origin),
                    (b"access-control-expose-headers", b"*"),
                    (b"vary", b"Origin"),
                ]
            await send(message)

        await self._inner(scope, receive, send_with_cors)

    def _allows(self, origin: str) -> bool:
        return self._any or origin.lower() in self._origins

    @staticmethod
    def _vary(send: Send) -> Send:
        """``send``, adding ``Vary: Origin``: the answer would differ for a listed page."""

        async def send_with_vary(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), (b"vary", b"Origin")]
            await send(message)

        return send_with_vary


async def _send_preflight(send: Send, allow_origin: bytes, request_headers: bytes | None) -> None:
    headers = [
        (b"access-control-allow-origin", allow_origin),
        (b"access-control-allow-methods", ALLOW_METHODS),
        (b"access-control-max-age", b"%d" % PREFLIGHT_MAX_AGE_S),
        (b"vary", _PREFLIGHT_VARY),
        (b"content-length", b"0"),
    ]
    if request_headers:
        # Whatever the page asks to send (authorization, content-type, the SDKs'
        # x-stainless-* headers) is fine: auth is checked on the real request.
        allowed = header_value(request_headers.decode("latin-1"))
        headers.append((b"access-control-allow-headers", allowed))
    await send({"type": "http.response.start", "status": 204, "headers": headers})
    await send({"type": "http.response.body", "body": b"", "more_body": False})
