"""Which names a keyless gateway answers to for stored data: loopback and ``ALLOWED_HOSTS``.

Why: DNS rebinding. A web page on ``attacker.example`` re-resolves its own name to
127.0.0.1, and from then on its requests reach a gateway on ``localhost`` as same-origin
ones. The origin policy (``edge.cors``) holds every ``POST`` and ``DELETE`` (browsers put
``Origin`` on those), but a same-origin ``GET`` carries no ``Origin``, so without a key
the page could list and download every stored batch input and output file, every batch
and every stored response. The one thing such a page cannot choose is the ``Host`` header:
the browser writes the name the page was loaded from (``attacker.example``), never a
loopback name. So a gateway without keys (no ``PROXY_API_KEYS``, no tenants file) serves
stored data only to requests addressed to ``localhost``, an address in 127.0.0.0/8,
``[::1]`` (any port), or a name listed in ``ALLOWED_HOSTS``; any other ``Host`` gets 403
``host_not_allowed``, in the client's dialect, before anything is read.

What counts as stored data: every route under ``/v1/files``, ``/v1/batches`` and
``/v1/responses/`` (retrieve, delete, input items; a batch's create and cancel read its
file and record), and in ``POST /v1/responses`` a ``previous_response_id`` or an
``item_reference`` (the door refuses those when this layer marks the request
``FOREIGN_HOST``; a stateless request still works, and one that stores its response
cannot read it back). The other routes keep answering any name: ``/v1/models``, the
generation routes (a browser can only reach them with an ``Origin``), ``/metrics`` and
``/dashboard`` (``METRICS_TOKEN`` guards those). A gateway with keys needs none of this:
a page cannot know a key. A request without ``Host`` (HTTP/1.0) is not a browser's, and
passes.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable
from typing import Final, final

from ..errors import ProxyError
from .http import ASGIApp, Receive, Scope, Send, dialect_error, normalize_path, send_json

__all__ = ["FOREIGN_HOST", "HostPolicy", "host_name", "host_not_allowed", "reads_stored_data"]

# Set in the scope of a request that a keyless gateway got under a name it does not serve
# stored data to; its value is that name.
FOREIGN_HOST: Final = "trio_batcher.foreign_host"

_STORED_ROOTS: Final = ("/v1/files", "/v1/batches")
_STORED_PREFIXES: Final = ("/v1/files/", "/v1/batches/", "/v1/responses/")


def reads_stored_data(path: str) -> bool:
    """Whether every request to the canonical ``path`` reads stored files, batches or
    responses."""
    return path in _STORED_ROOTS or path.startswith(_STORED_PREFIXES)


def host_name(host: str) -> str:
    """The name in a ``Host`` value, without its port, lower case, without a final dot;
    IPv6 literals keep their brackets (``[::1]``)."""
    host = host.strip().lower()
    if host.startswith("["):
        end = host.find("]")
        return host[: end + 1] if end > 0 else host
    name, colon, port = host.rpartition(":")
    if colon and port.isdigit():
        host = name
    return host.rstrip(".") if host != "." else host


def is_loopback(name: str) -> bool:
    """``localhost`` or a loopback address (127.0.0.0/8, ``[::1]``), as ``host_name`` spells it."""
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name.strip("[]")).is_loopback
    except ValueError:
        return False


def host_not_allowed(host: str, what: str = "stored files, batches and responses") -> ProxyError:
    shown = host if host.isascii() and host.isprintable() else ascii(host)
    return ProxyError(
        403,
        f"This gateway has no client keys, so it serves {what} only to requests addressed to "
        f"localhost, 127.0.0.1 or [::1] (or a name listed in ALLOWED_HOSTS); this one was "
        f"addressed to {shown!r}. Reach the gateway by a loopback address, list the name in "
        "ALLOWED_HOSTS, or set PROXY_API_KEYS.",
        type="permission_error",
        code="host_not_allowed",
    )


@final
class HostPolicy:
    """ASGI middleware in front of the app's routes (behind the origin policy).

    Args:
      inner: the app.
      allowed_hosts: ``ALLOWED_HOSTS``: names as ``host_name`` spells them, or ``*`` for any.
      keyed: whether client keys are required now (then nothing is checked).
      on_refused: called for each request refused (the app counts it as rejected).
    """

    def __init__(
        self,
        inner: ASGIApp,
        allowed_hosts: Iterable[str],
        keyed: Callable[[], bool],
        on_refused: Callable[[], None] = lambda: None,
    ) -> None:
        self._inner = inner
        self._keyed = keyed
        self._on_refused = on_refused
        hosts = frozenset(host_name(h) for h in allowed_hosts)
        self._any = "*" in hosts
        self._hosts = hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self._any or self._keyed():
            await self._inner(scope, receive, send)
            return
        host = None
        for name, value in scope["headers"]:
            if name == b"host":
                host = value.decode("latin-1")
                break
        if host is None or self._allows(host_name(host)):
            await self._inner(scope, receive, send)
            return
        if not reads_stored_data(normalize_path(scope["path"])):
            await self._inner({**scope, FOREIGN_HOST: host}, receive, send)
            return
        self._on_refused()
        # The body, if any, is left unread: the connection closes with the answer.
        status, body, headers = dialect_error(
            scope, host_not_allowed(host), {"Connection": "close"}
        )
        await send_json(send, body, status, headers)

    def _allows(self, name: str) -> bool:
        return name in self._hosts or is_loopback(name)
