"""Anthropic's Message Batches, relayed natively and owned by the tenant that made them.

Why the gateway keeps a table at all: every batch is created under the gateway's one
upstream key, and Anthropic would show any batch to whoever names its id. So each batch
is recorded as it is created (``store.owned``: owner = the tenant of the client's key,
``""`` for a gateway without keys; the upstream that holds it; its models and request
count), and every later call checks that table first: another owner's id is answered
exactly like an unknown one (Anthropic's 404 ``not_found_error``) and never reaches the
upstream. The list comes from the table too, so it shows each tenant only its own.

The list's items are the upstream's batch objects: the last one seen is kept in the
table's ``meta`` and a batch still in progress is refreshed from the upstream (a few at a
time, at most a page of them); an ended batch no longer changes and is served as kept.

Spend: a batch costs its owner its results' usage at the Message Batches price, charged
once (``meta.charged``, kept across restarts) when the gateway first sees the batch ended
-- a retrieve or list showing ``processing_status: ended`` (the results are then read in
the background and tallied) or a results download (tallied as it streams past),
whichever completes first.

Bodies: the results are relayed chunk by chunk and never held whole; a create body (up
to Anthropic's 256 MB) is read once, parsed off the event loop when large, checked
(envelope and tenant rules) and sent as the same bytes.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, Final, Protocol, final

import trio
from quart import Response, request
from quart_trio import QuartTrio
from werkzeug.exceptions import RequestEntityTooLarge

from ..errors import ProxyError
from ..observatory.latency import Timing
from ..observatory.metrics import MetricsRegistry
from ..pipeline.tenancy import TenantGuard
from ..settings import Settings
from ..store.owned import OwnedObject, OwnedObjects
from ..tenants import Tenant, TenantsWatcher
from ..upstream.native_batches import BATCHES_PATH, NativeBatchesClient
from ..upstream.pool import UpstreamPool
from ..upstreams.fleet import Fleet
from .anthropic_batch_body import (
    MAX_CREATE_BYTES,
    BatchEnvelope,
    ResultsTally,
    parse_create_body,
)
from .api_routes import moved_away
from .auth import client_key
from .body import LARGE_BODY_BYTES

__all__ = ["BATCHES_PATH", "MAX_CREATE_BYTES", "SURFACE", "register_anthropic_batches"]

log = logging.getLogger("trio_batcher")

SURFACE: Final = "anthropic.batches"
KIND: Final = "batch"
_MAX_LIST: Final = 1000  # Anthropic's own bound on a page
_REFRESHES: Final = 8  # batches refreshed from the upstream at once for a list
_JSON: Final = "application/json"


class Runtime(Protocol):
    """What the routes need of the running app's ``runtime.Runtime``."""

    @property
    def settings(self) -> Settings: ...

    @property
    def http(self) -> UpstreamPool: ...

    @property
    def fleet(self) -> Fleet: ...

    @property
    def guard(self) -> TenantGuard: ...

    @property
    def metrics(self) -> MetricsRegistry | None: ...

    def record_batch_usage(
        self, tenant: str | None, model: str, usage: Mapping[str, Any], requests: int
    ) -> None: ...


def _not_found(batch_id: str) -> ProxyError:
    return ProxyError(
        404,
        f"No Message Batch with id '{batch_id}' was found.",
        type="not_found_error",
        code="not_found_error",
    )


def _json(body: Any) -> Response:
    return Response(json.dumps(body, separators=(",", ":"), ensure_ascii=False), content_type=_JSON)


@final
class _Charges:
    """Charge each batch's spend to its owner exactly once (module doc)."""

    def __init__(self, owned: OwnedObjects, runtime: Callable[[], Runtime | None]) -> None:
        self._owned = owned
        self._runtime = runtime
        self._lock = trio.Lock()  # the check and the mark are one step
        self._reading: set[str] = set()  # batches whose results are being read to charge

    @staticmethod
    def due(found: OwnedObject, batch: Mapping[str, Any]) -> bool:
        return batch.get("processing_status") == "ended" and not found.meta.get("charged")

    async def settle(self, found: OwnedObject, tally: ResultsTally) -> None:
        """``tally`` is the batch's whole results: charge them unless already charged."""
        if not tally.complete:
            return
        async with self._lock:
            now = await self._owned.get(KIND, found.id, found.owner)
            if now is None or now.meta.get("charged"):
                return
            # Marked first: a crash between the two loses a charge rather than doubling one.
            await self._owned.update(KIND, found.id, {**now.meta, "charged": True})
            rt = self._runtime()
            if rt is None:
                return
            tenant = now.meta.get("tenant")
            for model, usage in tally.usage.items():
                rt.record_batch_usage(
                    tenant if isinstance(tenant, str) else None,
                    model,
                    usage,
                    tally.requests.get(model, 0),
                )

    async def keep(self, found: OwnedObject, batch: Mapping[str, Any]) -> None:
        """Keep ``batch`` as the last seen object (under the lock: never over a charge's
        mark with an older ``meta``)."""
        async with self._lock:
            now = await self._owned.get(KIND, found.id, found.owner)
            if now is not None:
                await self._owned.update(KIND, found.id, {**now.meta, "object": dict(batch)})

    async def read_and_settle(self, client: NativeBatchesClient, found: OwnedObject) -> None:
        """Read an ended batch's results once, in the background, and charge them."""
        if found.id in self._reading:
            return
        self._reading.add(found.id)
        try:
            tally = ResultsTally()
            stream = await client.stream(client.path(found.id, "/results"), {})
            async for chunk in stream:
                tally.feed(chunk)
            tally.close()
            await self.settle(found, tally)
        except ProxyError as exc:
            # Charged later, when the results are read or the batch is seen ended again.
            log.warning(
                "could not read batch %s's results to charge them: %s", found.id, exc.message
            )
        except Exception:  # in the app's nursery: a failure here must not stop the app
            log.exception("could not charge batch %s", found.id)
        finally:
            self._reading.discard(found.id)


def register_anthropic_batches(
    app: QuartTrio,
    *,
    owned: OwnedObjects,
    tenants: TenantsWatcher,
    runtime: Callable[[], Runtime | None],
) -> None:
    """Serve ``/v1/messages/batches`` and its sub-routes on ``app`` (module doc).

    Authentication is the app's (``before_request``: every ``/v1/`` path); its refusals
    are Anthropic-shaped here, as every answer on a ``/messages`` path is.
    """
    charges = _Charges(owned, runtime)
    large_bodies = trio.CapacityLimiter(1)
    clients: dict[int, NativeBatchesClient] = {}

    def running() -> Runtime:
        rt = runtime()
        if rt is None:
            raise ProxyError(503, "The proxy is starting up.", code="starting")
        return rt

    def upstream() -> tuple[str, NativeBatchesClient]:
        """The first anthropic upstream: its name, and a client on the app's pool (which
        ``runtime.effective_settings`` points at it, with its key)."""
        rt = running()
        for steward in rt.fleet.stewards:
            if steward.spec.kind == "anthropic":
                break
        else:
            raise ProxyError(
                400,
                "Message Batches live in an Anthropic organisation, which only an anthropic "
                "upstream carries; this gateway's upstreams are all bedrock or vertex ones.",
                type="invalid_request_error",
                code="unsupported_by_upstream",
            )
        client = clients.get(id(rt))
        if client is None:
            clients.clear()
            client = clients[id(rt)] = NativeBatchesClient(rt.settings, rt.http)
        return steward.name, client

    def caller() -> tuple[str, Tenant | None]:
        """The owner (tenant name; ``""`` without keys) and the tenant."""
        directory = tenants.directory
        headers = request.headers
        tenant = directory.lookup(
            client_key(
                headers.get("Authorization"), headers.get("api-key"), headers.get("x-api-key")
            )
        )
        return (tenant.name if tenant is not None and directory.auth_required else ""), tenant

    async def owned_batch(batch_id: str) -> OwnedObject:
        found = await owned.get(KIND, batch_id, caller()[0])
        if found is None:
            raise _not_found(batch_id)
        if found.upstream != upstream()[0]:
            # Pinned to the upstream that holds it: no other organisation knows the id.
            raise moved_away("batch", batch_id, found.upstream)
        return found

    def counted(
        view: Callable[..., Awaitable[Response]],
    ) -> Callable[..., Awaitable[Response]]:
        """Count the call under ``anthropic.batches`` with its status."""

        async def wrapper(**kwargs: Any) -> Response:
            arrived = trio.current_time()
            status = 500
            try:
                response = await view(**kwargs)
                status = response.status_code
                return response
            except ProxyError as exc:
                status = exc.upstream_status or exc.status
                raise
            finally:
                rt = runtime()
                if rt is not None and rt.metrics is not None:
                    timing = Timing(total=trio.current_time() - arrived)
                    rt.metrics.record_call(SURFACE, status, timing)

        wrapper.__name__ = f"anthropic_batches_{view.__name__}"
        return wrapper

    async def remember(found: OwnedObject, batch: Mapping[str, Any]) -> None:
        """Keep ``batch`` as last seen; start charging it if it has just ended (its results
        are read in the app's nursery: the answer does not wait for them)."""
        await charges.keep(found, batch)
        if charges.due(found, batch):
            app.nursery.start_soon(charges.read_and_settle, upstream()[1], found)

    def forwarded() -> dict[str, str]:
        """The client's headers that go upstream with its call."""
        return {
            name: ", ".join(values)
            for name in ("anthropic-version", "anthropic-beta")
            if (values := request.headers.getlist(name))
        }

    async def read_body() -> bytes:
        length = request.content_length
        if length is not None and length > MAX_CREATE_BYTES:
            raise _too_large()
        parts: list[bytes] = []
        size = 0
        try:
            async for chunk in request.body:
                size += len(chunk)
                if size > MAX_CREATE_BYTES:
                    raise _too_large()
                parts.append(chunk)
        except RequestEntityTooLarge:
            raise _too_large() from None
        raw = b"".join(parts)
        del parts
        return raw

    async def create() -> Response:
        rt = running()
        name, client = upstream()
        owner, tenant = caller()
        raw = await read_body()
        envelope: BatchEnvelope
        if len(raw) < LARGE_BODY_BYTES:
            envelope = parse_create_body(raw)
        else:  # seconds of CPU for a large batch: off the event loop, one at a time
            envelope = await trio.to_thread.run_sync(parse_create_body, raw, limiter=large_bodies)
        if tenant is not None:
            for model in envelope.models:
                if not tenant.allows_model(model):
                    raise ProxyError(
                        403,
                        f"Tenant '{tenant.name}' may not use the model '{model}'.",
                        type="permission_error",
                        param="model",
                        code="model_not_allowed",
                    )
            rt.guard.check_budget(tenant)
        batch = await client.call(b"POST", client.path(), forwarded(), raw)
        del raw
        meta = {
            "models": list(envelope.models),
            "requests": envelope.requests,
            "tenant": tenant.name if tenant is not None else None,
            "charged": False,
            "object": batch,
        }
        await owned.record(KIND, batch["id"], owner, name, meta)
        return _json(batch)

    async def listed() -> Response:
        args = request.args
        try:
            limit = int(args.get("limit", "20"))
        except ValueError:
            limit = 0
        if not 1 <= limit <= _MAX_LIST:
            raise ProxyError(
                400,
                f"limit must be an integer from 1 to {_MAX_LIST}.",
                type="invalid_request_error",
                param="limit",
            )
        after_id, before_id = args.get("after_id"), args.get("before_id")
        if after_id is not None and before_id is not None:
            raise ProxyError(
                400,
                "Give at most one of before_id and after_id.",
                type="invalid_request_error",
            )
        owner = caller()[0]
        # Anthropic's cursors count in the list's order, newest first: ``after_id`` pages
        # on to older batches (the table's ``before``), ``before_id`` back to newer ones.
        page = await owned.page(KIND, owner, limit=limit, before=after_id, after=before_id)
        data: list[Any] = [o.meta.get("object") for o in page.data]
        stale = [
            i
            for i, o in enumerate(page.data)
            if not isinstance(data[i], Mapping) or data[i].get("processing_status") != "ended"
        ]
        if stale:
            _, client = upstream()
            limiter = trio.CapacityLimiter(_REFRESHES)
            headers = forwarded()

            async def refresh(i: int) -> None:
                async with limiter:
                    found = page.data[i]
                    try:
                        batch = await client.call(b"GET", client.path(found.id), headers)
                    except ProxyError as exc:
                        if data[i] is None:
                            raise
                        log.info("batch %s kept as last seen: %s", found.id, exc.message)
                        return
                    data[i] = batch
                    await remember(found, batch)

            async with trio.open_nursery() as nursery:
                for i in stale:
                    nursery.start_soon(refresh, i)
        return _json(
            {
                "data": data,
                "has_more": page.has_more,
                "first_id": page.data[0].id if page.data else None,
                "last_id": page.data[-1].id if page.data else None,
            }
        )

    async def retrieve(batch_id: str) -> Response:
        found = await owned_batch(batch_id)
        _, client = upstream()
        batch = await client.call(b"GET", client.path(batch_id), forwarded())
        await remember(found, batch)
        return _json(batch)

    async def cancel(batch_id: str) -> Response:
        found = await owned_batch(batch_id)
        _, client = upstream()
        batch = await client.call(b"POST", client.path(batch_id, "/cancel"), forwarded())
        await remember(found, batch)
        return _json(batch)

    async def delete(batch_id: str) -> Response:
        await owned_batch(batch_id)
        _, client = upstream()
        answer = await client.call(b"DELETE", client.path(batch_id), forwarded())
        await owned.forget(KIND, batch_id)
        return _json(answer)

    async def results(batch_id: str) -> Response:
        found = await owned_batch(batch_id)
        _, client = upstream()
        stream = await client.stream(client.path(batch_id, "/results"), forwarded())

        async def relay() -> AsyncIterator[bytes]:
            tally = ResultsTally() if not found.meta.get("charged") else None
            async for chunk in stream:
                if tally is not None:
                    tally.feed(chunk)
                yield chunk
            if tally is not None:
                tally.close()
                await charges.settle(found, tally)

        response = Response(relay(), content_type=stream.content_type)
        response.timeout = None  # a results file may take minutes; REQUEST_TIMEOUT_S aside
        return response

    base = BATCHES_PATH
    app.add_url_rule(base, view_func=counted(create), methods=["POST"])
    app.add_url_rule(base, view_func=counted(listed), methods=["GET"])
    app.add_url_rule(f"{base}/<batch_id>", view_func=counted(retrieve), methods=["GET"])
    app.add_url_rule(f"{base}/<batch_id>", view_func=counted(delete), methods=["DELETE"])
    app.add_url_rule(f"{base}/<batch_id>/cancel", view_func=counted(cancel), methods=["POST"])
    app.add_url_rule(f"{base}/<batch_id>/results", view_func=counted(results), methods=["GET"])


def _too_large() -> ProxyError:
    return ProxyError(
        413,
        f"A Message Batch's body may be at most {MAX_CREATE_BYTES // (1024 * 1024)} MB.",
        type="request_too_large",
        code="request_too_large",
        headers={"Connection": "close"},
    )
