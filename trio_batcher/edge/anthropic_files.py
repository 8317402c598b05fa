"""Anthropic's Files API (beta ``files-api-2025-04-14``) relayed, each file its tenant's.

Routes: ``POST /v1/files`` (upload), ``GET /v1/files`` (list), ``GET /v1/files/{id}``
(metadata), ``GET /v1/files/{id}/content`` (download), ``DELETE /v1/files/{id}``.

**Which Files API.** OpenAI's Files API has the same paths, and the gateway serves it
from its own store for batches (``edge.openai_files``). A request is Anthropic's when it
carries ``anthropic-version`` (every Anthropic SDK sends it) or an ``anthropic-beta``
naming ``files-api-...``; anything else stays OpenAI's (``is_anthropic_files``).

**Ownership.** Every file is created under the gateway's one upstream key, so the
gateway remembers who uploaded it (``store.owned``, kind ``"file"``, owner the tenant,
upstream the first anthropic upstream that holds it). Metadata, download and delete of a
file another tenant owns -- or of an id never seen -- are answered with Anthropic's 404
``not_found_error`` without calling the upstream; a list shows the caller's own files,
newest first, from the table (no upstream call: the upstream would list everyone's).
``known_file`` gives the Messages door the same check for a ``file`` source.

**Streaming.** Served straight from ASGI, in front of Quart, which would read an upload
whole into memory: the client's multipart body is handed to the upstream request as it
arrives (a ``SizedBody`` of the client's ``Content-Length``, read from ``receive`` chunk by
chunk, which stops hypercorn reading the socket while the upstream is slower), and a
download goes back chunk by chunk as the upstream sends it. A client that leaves
mid-upload ends the upstream request mid-body, so the upstream keeps no file. An upload
without ``Content-Length`` (chunked) is refused with a 411: the upstream request needs
its length up front and the gateway does not spool uploads.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import Any, Final, Protocol, final
from urllib.parse import parse_qs

import trio

from ..errors import ProxyError, invalid_request
from ..observatory.metrics import MetricsRegistry, Timing
from ..settings import Settings
from ..store import StoreUnavailable
from ..store.owned import OwnedObject, OwnedObjects
from ..tenants import Tenant, TenantDirectory
from ..translation.anthropic_messages import error_reply as anthropic_error_reply
from ..translation.anthropic_messages import relayed_headers
from ..upstream.anthropic_files import MAX_METADATA_BYTES, AnthropicFilesClient
from ..upstream.exchange import TRANSPORT_ERRORS
from ..upstream.pool import UpstreamPool
from ..upstreams.facts import file_ids
from ..upstreams.fleet import Fleet
from .api_routes import moved_away
from .auth import client_key, proxy_key_error
from .http import ASGIApp, Receive, Scope, Send, cancel_on_disconnect, send_json

__all__ = ["SURFACE", "AnthropicFiles", "ClientLeft", "file_ids", "is_anthropic_files", "owner_of"]

log = logging.getLogger("trio_batcher")

FILES_PATH: Final = "/v1/files"
SURFACE: Final = "anthropic.files"
KIND: Final = "file"
_DEFAULT_LIMIT: Final = 20
_MAX_LIMIT: Final = 1000
_KEY_HEADERS: Final = frozenset({b"authorization", b"api-key", b"x-api-key"})


class Runtime(Protocol):
    """What the routes use of the running app (``runtime.Runtime``)."""

    settings: Settings
    http: UpstreamPool
    fleet: Fleet
    metrics: MetricsRegistry | None


def is_anthropic_files(scope: Mapping[str, Any]) -> bool:
    """A ``/v1/files`` request in Anthropic's dialect (module doc: which Files API)."""
    path = scope["path"]
    if path != FILES_PATH and not path.startswith(FILES_PATH + "/"):
        return False
    for name, value in scope["headers"]:
        if name == b"anthropic-version":
            return True
        if name == b"anthropic-beta" and b"files-api-" in value:
            return True
    return False


def owner_of(directory: TenantDirectory, tenant: Tenant | None) -> str:
    """Whose objects a caller sees: its tenant's name, ``""`` on a gateway without keys."""
    if not directory.auth_required or tenant is None:
        return ""
    return tenant.name


def file_not_found(file_id: str) -> ProxyError:
    """Anthropic's answer for a file id it does not know: a 404 ``not_found_error``."""
    return ProxyError(404, f"File not found: {file_id}", type="not_found_error")


@final
class _ClientBody:
    """The client's request body, read from ASGI ``receive`` as the upstream takes it.

    Iterable once: the pool sends a body again only when it can prove no byte of it left
    (``upstream.pool``), which cannot happen after the first chunk was taken from the
    client. A client that leaves raises ``ClientLeft`` out of the upstream write.
    """

    def __init__(self, receive: Receive, size: int) -> None:
        self._receive = receive
        self._size = size
        self._started = False

    def __len__(self) -> int:
        return self._size

    async def __aiter__(self) -> AsyncIterator[bytes]:
        if self._started:
            raise ClientLeft("the upload cannot be sent a second time")
        self._started = True
        sent = 0
        while True:
            message = await self._receive()
            if message["type"] != "http.request":
                raise ClientLeft("the client left during its upload")
            chunk = message.get("body", b"")
            sent += len(chunk)
            if sent > self._size:
                raise ClientLeft("the upload is longer than its Content-Length")
            if chunk:
                yield chunk
            if not message.get("more_body", False):
                return


class ClientLeft(Exception):
    """The client went away (or broke its framing) while its upload was being relayed."""


@final
class AnthropicFiles:
    """The Files routes (module doc); ``wrap`` puts them in front of an ASGI app."""

    def __init__(
        self,
        owned: OwnedObjects,
        runtime: Callable[[], Runtime | None],
        directory: Callable[[], TenantDirectory],
    ) -> None:
        self._owned = owned
        self._runtime = runtime
        self._directory = directory

    def wrap(self, inner: ASGIApp) -> ASGIApp:
        """``inner`` with Anthropic's ``/v1/files`` requests taken out in front of it."""

        async def app(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http" or not is_anthropic_files(scope):
                await inner(scope, receive, send)
                return
            await self._serve(scope, receive, send)

        return app

    async def known_file(self, file_id: str, tenant: Tenant | None) -> bool:
        """Whether ``tenant`` may name ``file_id`` (its own file), for the Messages door."""
        owner = owner_of(self._directory(), tenant)
        return await self._owned.get(KIND, file_id, owner) is not None

    # -- serving ----------------------------------------------------------------------------

    async def _serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        arrived = trio.current_time()
        status = 499
        try:
            rt = self._runtime()
            if rt is None:
                raise ProxyError(503, "The proxy is starting up.", code="starting")
            owner = self._owner(scope)
            if not rt.fleet.has_anthropic:
                raise invalid_request(
                    "The Files API lives in an Anthropic organisation, which only an "
                    "anthropic upstream carries; this gateway's upstreams are all bedrock "
                    "or vertex ones."
                )
            status = await self._route(rt, owner, scope, receive, send)
        except ProxyError as exc:
            status_, body, headers = anthropic_error_reply(exc)
            status = status_
            await send_json(send, body, status_, headers)
        except StoreUnavailable as exc:
            status = 503
            error = ProxyError(503, f"The gateway's store is unavailable: {exc}", code="store")
            status_, body, headers = anthropic_error_reply(error)
            await send_json(send, body, status_, headers)
        finally:
            rt = self._runtime()
            if rt is not None and rt.metrics is not None:
                timing = Timing(total=trio.current_time() - arrived)
                rt.metrics.record_call(SURFACE, status, timing)

    def _owner(self, scope: Scope) -> str:
        directory = self._directory()
        if not directory.auth_required:
            return ""
        found: dict[bytes, str] = {}
        for name, value in scope["headers"]:
            if name in _KEY_HEADERS:
                found.setdefault(name, value.decode("latin-1"))
        key = client_key(
            found.get(b"authorization"), found.get(b"api-key"), found.get(b"x-api-key")
        )
        tenant = directory.lookup(key)
        if tenant is None:
            raise proxy_key_error()
        return tenant.name

    async def _route(
        self, rt: Runtime, owner: str, scope: Scope, receive: Receive, send: Send
    ) -> int:
        method: str = scope["method"]
        rest = scope["path"][len(FILES_PATH) :].strip("/")
        parts = rest.split("/") if rest else []
        client = AnthropicFilesClient(rt.settings, rt.http)
        if not parts and method == "POST":
            return await self._upload(rt, client, owner, scope, receive, send)
        if not parts and method == "GET":
            return await self._list(owner, scope, send)
        if len(parts) == 1 and method in ("GET", "DELETE"):
            found = await self._held(rt, parts[0], owner)
            return await self._relay(client, method, found, scope, receive, send)
        if len(parts) == 2 and parts[1] == "content" and method == "GET":
            found = await self._held(rt, parts[0], owner)
            return await self._relay(client, method, found, scope, receive, send, "/content")
        if len(parts) <= 2:
            raise ProxyError(405, f"Method {method} is not allowed on {scope['path']}.")
        raise ProxyError(404, f"Unknown route: {method} {scope['path']}.", type="not_found_error")

    async def _held(self, rt: Runtime, file_id: str, owner: str) -> OwnedObject:
        """``owner``'s file ``file_id``, held by the upstream the gateway sends files to:
        another owner's or an unknown id is Anthropic's 404; one whose upstream is no
        longer that one is a 404 that says so (no other organisation knows the id)."""
        found = await self._owned.get(KIND, file_id, owner)
        if found is None:
            raise file_not_found(file_id)
        if found.upstream != _files_upstream(rt):
            raise moved_away("file", file_id, found.upstream)
        return found

    async def _upload(
        self,
        rt: Runtime,
        client: AnthropicFilesClient,
        owner: str,
        scope: Scope,
        receive: Receive,
        send: Send,
    ) -> int:
        headers: list[tuple[bytes, bytes]] = scope["headers"]
        length = _header(headers, b"content-length")
        content_type = _header(headers, b"content-type")
        if content_type is None or not content_type.startswith(b"multipart/form-data"):
            raise invalid_request("Upload the file as multipart/form-data with a 'file' part.")
        if length is None or not length.strip().isdigit():
            raise ProxyError(
                411,
                "An upload needs a Content-Length: the gateway streams it to the upstream, "
                "which takes its length up front.",
                code="length_required",
            )
        body = _ClientBody(receive, int(length))
        try:
            response = await client.send(
                b"POST", None, headers, content=body, content_type=content_type
            )
        except ClientLeft:
            return 499  # the upstream request was cut mid-body: no file was made
        try:
            if response.status_code != 200:
                raise await client.error(response)
            raw = await response.read(MAX_METADATA_BYTES)
        except TRANSPORT_ERRORS as exc:
            raise ProxyError(502, "The upstream's answer was cut off.", code="upstream") from exc
        finally:
            await response.aclose()
        meta = _metadata(raw)
        upstream = _files_upstream(rt)
        await self._owned.record(KIND, meta["id"], owner, upstream, meta)
        await send_json(send, raw, 200, relayed_headers(response.headers))
        return 200

    async def _list(self, owner: str, scope: Scope, send: Send) -> int:
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))

        def one(name: str) -> str | None:
            values = query.get(name)
            return values[-1] if values and values[-1] else None

        limit = _limit(one("limit"))
        # Anthropic's lists run newest first: ``after_id`` (and the SDK's ``page``
        # cursor, ``next_page``) pages toward older files, ``before_id`` toward newer.
        after_id = one("after_id") or one("page")
        before_id = one("before_id")
        if before_id is not None:
            newer = await self._owned.page(KIND, owner, limit=1_000_000, after=before_id)
            rows, has_more = newer.data[-limit:], len(newer.data) > limit
        else:
            page = await self._owned.page(KIND, owner, limit=limit, before=after_id)
            rows, has_more = page.data, page.has_more
        data = [_listed(row) for row in rows]
        last = data[-1]["id"] if data else None
        await send_json(
            send,
            {
                "data": data,
                "has_more": has_more,
                "first_id": data[0]["id"] if data else None,
                "last_id": last,
                "next_page": last if has_more and before_id is None else None,
            },
            200,
        )
        return 200

    async def _relay(
        self,
        client: AnthropicFilesClient,
        method: str,
        found: OwnedObject,
        scope: Scope,
        receive: Receive,
        send: Send,
        suffix: str = "",
    ) -> int:
        """Metadata, download or delete of an owned file, the answer relayed as it comes."""
        outcome = [499]  # until the answer is out: a client that leaves cancels the scope
        async with trio.open_nursery() as nursery:
            # A client that leaves cancels the upstream call (and a download under way).
            nursery.start_soon(cancel_on_disconnect, receive, nursery.cancel_scope)
            try:
                await self._relay_call(client, method, found, scope, send, suffix, outcome)
            except ProxyError as exc:  # answered here: out of the nursery it would be grouped
                status, body, headers = anthropic_error_reply(exc)
                outcome[0] = status
                await send_json(send, body, status, headers)
            nursery.cancel_scope.cancel()
        return outcome[0]

    async def _relay_call(
        self,
        client: AnthropicFilesClient,
        method: str,
        found: OwnedObject,
        scope: Scope,
        send: Send,
        suffix: str,
        outcome: list[int],
    ) -> None:
        response = await client.send(method.encode(), found.id, scope["headers"], suffix=suffix)
        try:
            if response.status_code != 200:
                if response.status_code == 404 and method == "DELETE":
                    await self._owned.forget(KIND, found.id)  # gone upstream already
                raise await client.error(response)
            if method == "DELETE":
                await self._owned.forget(KIND, found.id)
            if await _relay_body(send, response):
                outcome[0] = 200
        finally:
            await response.aclose()


async def _relay_body(send: Send, response: Any) -> bool:
    """The upstream's 200 answer to the client, chunk by chunk as it arrives; whether it
    went out whole."""
    kept = relayed_headers(response.headers)
    out = [(name.encode(), value.encode("latin-1")) for name, value in kept.items()]
    for name in ("content-type", "content-length", "content-disposition"):
        value = response.headers.get(name)
        if value is not None:
            out.append((name.encode(), value.encode("latin-1")))
    await send({"type": "http.response.start", "status": 200, "headers": out})
    try:
        async for chunk in response.aiter_raw():
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
    except TRANSPORT_ERRORS:
        log.warning("the upstream cut a file download short")
        return False  # the response is left unfinished: the client sees a cut body
    # Shielded: hypercorn reports the disconnect that ends every request as soon as the
    # last message is taken, which would cancel this very send.
    with trio.CancelScope(shield=True):
        await send({"type": "http.response.body", "body": b"", "more_body": False})
    return True


def _header(headers: Iterable[tuple[bytes, bytes]], wanted: bytes) -> bytes | None:
    return next((value for name, value in headers if name == wanted), None)


def _limit(raw: str | None) -> int:
    if raw is None:
        return _DEFAULT_LIMIT
    try:
        limit = int(raw)
    except ValueError:
        raise invalid_request(f"limit: Input should be a valid integer, not {raw!r}.") from None
    if not 1 <= limit <= _MAX_LIMIT:
        raise invalid_request(f"limit: Input should be between 1 and {_MAX_LIMIT}.")
    return limit


def _metadata(raw: bytes) -> dict[str, Any]:
    try:
        meta = json.loads(raw)
    except ValueError:
        meta = None
    if not isinstance(meta, dict) or not isinstance(meta.get("id"), str):
        raise ProxyError(
            502,
            "The upstream answered an upload with a body that is not a file's metadata.",
            code="upstream_protocol_error",
        )
    return meta


def _listed(row: OwnedObject) -> dict[str, Any]:
    """A listed file: the metadata the upstream answered its upload with."""
    return {**row.meta, "id": row.id, "type": "file"}


def _files_upstream(rt: Runtime) -> str:
    """The name of the upstream that holds the files: the first anthropic one."""
    for steward in rt.fleet.stewards:
        if steward.spec.kind == "anthropic":
            return steward.name
    return "default"
