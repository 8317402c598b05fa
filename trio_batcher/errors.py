"""Errors the proxy answers with, in OpenAI's shape.

Every error a client sees from us -- bad input, auth, shedding, an upstream failure -- is
one ``ProxyError`` rendered as ``{"error": {"message", "type", "param", "code"}}`` with all
four keys present, because that is what the ``openai`` SDK (and every client written
against OpenAI) parses. Raising it anywhere below the HTTP layer is the one way to pick a
status code; the HTTP layer only serialises it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, final

# OpenAI's own ``type`` strings where it has one for the status, ours otherwise.
_DEFAULT_TYPES: Final[Mapping[int, str]] = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    408: "timeout_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    502: "upstream_error",
    503: "service_unavailable",
    504: "timeout_error",
}


@final
class ProxyError(Exception):
    """An error with an HTTP status and an OpenAI-shaped body.

    Args:
      status: the HTTP status the client receives.
      message: human-readable; never contains the upstream API key.
      type: OpenAI error ``type``; defaults from the status.
      param: the request field at fault (``"messages[2].content"``), when there is one.
      code: a machine-readable code (``"queue_full"``, ``"model_not_found"``...).
      headers: extra response headers (``Retry-After``, ``x-request-id``...).
      upstream_status: for an error the upstream answered, its own status (529, 500...),
        which retry decisions need; ``None`` for errors of our own making.
      retry_after: seconds the upstream asked us to wait (``retry-after-ms`` or
        ``retry-after``), if it said.
      upstream_body: for an error the upstream answered, its body as sent (our key
        redacted), so that a door speaking the upstream's own dialect can relay it as it is.
      upstream_headers: likewise, the upstream's response headers (lower-case names).

    ``upstream`` names the upstream that answered it, when the gateway has several
    (set by ``upstreams.fleet``; the observatory counts errors by it).
    """

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str | None = None,
        param: str | None = None,
        code: str | None = None,
        headers: Mapping[str, str] | None = None,
        upstream_status: int | None = None,
        retry_after: float | None = None,
        upstream_body: bytes | None = None,
        upstream_headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.upstream: str | None = None
        self.upstream_body = upstream_body
        self.upstream_headers = upstream_headers
        self.upstream_status = upstream_status
        self.retry_after = retry_after
        self.status = status
        self.message = message
        self.type = type or _DEFAULT_TYPES.get(
            status, "server_error" if status >= 500 else "invalid_request_error"
        )
        self.param = param
        self.code = code
        self.headers: dict[str, str] = dict(headers or {})

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.type, param=self.param, code=self.code)

    def __repr__(self) -> str:
        return f"ProxyError({self.status}, {self.message!r}, type={self.type!r}, param={self.param!r}, code={self.code!r})"


def error_body(
    message: str, type: str, *, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    """The OpenAI error envelope; all four keys are always present."""
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def invalid_request(
    message: str, *, param: str | None = None, code: str | None = None
) -> ProxyError:
    """A 400 ``invalid_request_error``: the shape every validation failure takes."""
    return ProxyError(400, message, type="invalid_request_error", param=param, code=code)


def forget_traceback(exc: BaseException) -> None:
    """Drop the tracebacks of an error that has been answered (and logged, if it was).

    A traceback holds every frame the error passed through, and some of those frames hold
    the error itself (a ticket's outcome, a local): a reference cycle, which only the
    cyclic collector frees, with every request object the frames point at. Nobody reads
    the traceback of an answered error, so cutting it lets reference counting free the
    lot at once. Chained errors (``__cause__``, ``__context__``) are cut too.
    """
    seen: set[int] = set()
    pending: list[BaseException | None] = [exc]
    while pending:
        error = pending.pop()
        if error is None or id(error) in seen:
            continue
        seen.add(id(error))
        error.__traceback__ = None
        pending += [error.__cause__, error.__context__]
        if isinstance(error, BaseExceptionGroup):
            pending += error.exceptions
