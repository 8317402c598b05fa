"""Background responses (``background: true``): accepted at once, run by the gateway.

Theory of operation
-------------------
The Responses door validates a background request exactly as a foreground one (a bad
body is a 400 with no upstream call and nothing stored), checks the tenant's budget, and
hands it to the ``BackgroundRunner``, which stores it as ``queued`` and starts a task for
it in its own nursery -- opened by ``run``, which the app's lifespan nursery owns, so no
work is ever fire-and-forget. The create call is answered with the ``queued`` response
object (``output: []``, ``usage: null``, ``background: true``) -- or, with ``stream:
true``, with a stream that begins ``response.created`` / ``response.queued``.

Each task waits for one of ``BACKGROUND_MAX_RUNNING`` run slots (queued; at most
``BACKGROUND_MAX_QUEUED`` wait, past that a new one is a 429), stores ``in_progress``, and
runs the request through the pipeline exactly as a foreground call would (tenant
admission, gate, dispatcher, retries, deadline ``REQUEST_TIMEOUT_S`` counted from the
start of the run), only detached from any client: every request goes through
``background_request`` first. The final object -- ``completed``, ``incomplete``,
``failed`` (with ``error {code, message}``) -- is what the foreground call would have
returned, and is stored before the response counts as done. A streamed one's events go
into an ``EventLog`` that readers follow (``background_events``); a reader that leaves
does not stop the response.

Cancel (``POST /v1/responses/{id}/cancel``) cancels the task's scope: the pipeline closes
the upstream call at once, and the response is stored ``cancelled``.

Restarts: each accepted response holds a lease in the store (``LEASE_S``, renewed every
``RENEW_EVERY_S`` while this process runs it), taken before the response is first
stored. A graceful shutdown fails what is still queued at once, lets the running ones
finish within ``SHUTDOWN_GRACE_S``, then cancels them and stores each ``failed`` with a
message that says the gateway shut down. A process that dies leaves its leases to lapse:
at startup, and every ``RENEW_EVERY_S`` after, the runner marks ``failed`` every
background response of the deployment left ``queued`` / ``in_progress`` whose lease has
lapsed (a lease is dropped only once the final object is stored, so a final write that
failed is caught the same way). Nothing is resumed (the upstream request is not kept); nothing stays
``in_progress`` for ever, and other processes sharing ``DATA_DIR`` keep theirs.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import Any, Final, final

import trio

from ..errors import ProxyError
from ..observatory.background import BackgroundStats
from ..pipeline.contract import StreamReply
from ..pipeline.core import Pipeline
from ..store import ResponseStore, StoredResponse
from ..store.responses import StoreUnavailable
from ..tenants import Tenant
from ..translation.openai_responses import ResponsesCodec, ResponsesRequest
from ..translation.openai_responses.response import response_object
from ..upstream.request import UpstreamRequest
from .background_events import EventLog

__all__ = [
    "LEASE_S",
    "RENEW_EVERY_S",
    "BackgroundJob",
    "BackgroundRunner",
    "background_request",
]

log = logging.getLogger("trio_batcher")

LEASE_S: Final = 30.0
RENEW_EVERY_S: Final = 10.0
# A finished stream's events stay for resuming this long, at most this many logs.
KEEP_FINISHED_S: Final = 60.0
MAX_FINISHED_LOGS: Final = 64
# How long the final write may take once the work is over (shielded).
_FINAL_WRITE_S: Final = 5.0
FINAL_STATUSES: Final = frozenset({"completed", "incomplete", "failed", "cancelled"})

_ORPHANED: Final = {
    "code": "server_error",
    "message": "The gateway process running this background response stopped (a crash or "
    "a restart) before it finished; create the response again.",
}
_SHUT_DOWN_RUNNING: Final = (
    "The gateway shut down (SHUTDOWN_GRACE_S passed) before this background response "
    "finished; create the response again."
)
_SHUT_DOWN_QUEUED: Final = (
    "The gateway shut down before this background response started; create the response again."
)


def background_request(request: UpstreamRequest) -> UpstreamRequest:
    """Every background request passes here before the pipeline runs it: marked
    deferrable, so it queues behind interactive requests wherever requests queue (the
    admission gate, the upstream cap), within its lane's share (``admission.lanes``)."""
    return replace(request, deferrable=True)


@final
@dataclass(eq=False)
class BackgroundJob:
    """One accepted background response and what running it needs."""

    response_id: str
    owner: str
    tr: ResponsesRequest
    codec: ResponsesCodec
    request: UpstreamRequest | None
    tenant: Tenant | None
    created_at: int
    expires_at: float
    events: EventLog | None = None
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    done: trio.Event = field(default_factory=trio.Event)
    queued_at: float = 0.0
    started: bool = False
    cancel_requested: bool = False

    def snapshot(self, status: str, error: dict[str, Any] | None = None) -> dict[str, Any]:
        """The response object with no output yet (queued, in progress, ended early)."""
        return response_object(
            self.tr,
            response_id=self.response_id,
            created_at=self.created_at,
            status=status,
            output=[],
            usage=None,
            error=error,
        )

    def record(self, response: dict[str, Any]) -> StoredResponse:
        return StoredResponse(
            id=self.response_id,
            owner=self.owner,
            created_at=float(self.created_at),
            expires_at=self.expires_at,
            previous_id=self.tr.previous_response_id,
            response=response,
            input_items=self.tr.input_items,
        )


@final
class BackgroundRunner:
    """Runs one process's background responses; ``run`` in the app's nursery."""

    def __init__(
        self,
        store: ResponseStore,
        *,
        max_running: int,
        max_queued: int,
        stream_buffer_bytes: int,
        stats: BackgroundStats | None = None,
    ) -> None:
        self._store = store
        self._max_running = max_running
        self._max_queued = max_queued
        self.stream_buffer_bytes = stream_buffer_bytes
        self.stats = stats or BackgroundStats()
        self.runner_id = secrets.token_hex(8)  # this process, in the store's leases
        self._slots = trio.CapacityLimiter(max_running)
        self._jobs: dict[str, BackgroundJob] = {}
        self._finished_logs: OrderedDict[str, EventLog] = OrderedDict()
        self._accepting = 0
        self._pipeline: Pipeline | None = None
        self._nursery: trio.Nursery | None = None
        self._closed = False
        self._empty = trio.Event()
        self._empty.set()

    # -- lifetime -------------------------------------------------------------------------

    async def run(
        self, pipeline: Pipeline, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Own the background tasks until cancelled (the app's lifespan): first fail what a
        stopped process left unfinished, then renew this process's leases."""
        self._pipeline = pipeline
        await self._sweep()
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            while True:
                await trio.sleep(RENEW_EVERY_S)
                await self._renew()
                await self._sweep()

    def close(self) -> None:
        """The drain begins: accept nothing more, and fail what has not started."""
        self._closed = True
        for job in list(self._jobs.values()):
            if not job.started:
                job.scope.cancel()

    def cancel_remaining(self) -> None:
        """The grace period is over: stop every response still running."""
        for job in list(self._jobs.values()):
            job.scope.cancel()

    async def wait_idle(self) -> None:
        while self._jobs:
            await self._empty.wait()

    # -- requests -------------------------------------------------------------------------

    async def accept(self, job: BackgroundJob) -> dict[str, Any]:
        """Store ``job`` as queued and start it; returns the queued response object.

        Raises ``ProxyError`` 429 when the queue is full, 503 while shutting down, and
        ``StoreUnavailable`` when it cannot be stored (then nothing runs).
        """
        if self._closed or self._nursery is None:
            raise ProxyError(
                503,
                "The proxy is shutting down; retry on another instance.",
                code="shutdown",
                headers={"Retry-After": "1"},
            )
        backlog = len(self._jobs) + self._accepting
        if backlog >= self._max_running + self._max_queued:
            self.stats.record_rejected()
            raise ProxyError(
                429,
                f"Too many background responses are queued (BACKGROUND_MAX_QUEUED = "
                f"{self._max_queued}, {self._max_running} running); retry later.",
                type="rate_limit_error",
                code="background_queue_full",
                headers={"Retry-After": "1"},
            )
        queued = job.snapshot("queued")
        self._accepting += 1
        try:
            # The lease first: a process starting meanwhile never takes the new response
            # for an orphan.
            await self._store.lease([job.response_id], self.runner_id, time.time() + LEASE_S)
            await self._store.put(job.record(queued))
        finally:
            self._accepting -= 1
        if self._nursery is None or self._closed:  # the drain began while storing
            await self._write_final(job, job.snapshot("failed", _error(_SHUT_DOWN_QUEUED)))
            raise ProxyError(503, "The proxy is shutting down.", code="shutdown")
        job.queued_at = trio.current_time()
        self._jobs[job.response_id] = job
        self._empty = trio.Event()
        self.stats.record_accepted()
        self._nursery.start_soon(self._run, job)
        return queued

    async def cancel(self, response_id: str, owner: str) -> bool:
        """Cancel the response if this process runs it for ``owner``; once it returns
        the final object is stored. False when this process does not run it."""
        job = self._jobs.get(response_id)
        if job is None or job.owner != owner:
            return False
        if not job.done.is_set():
            job.cancel_requested = True
            job.scope.cancel()
            await job.done.wait()
        return True

    def running_here(self, response_id: str) -> bool:
        return response_id in self._jobs

    def events(self, response_id: str) -> EventLog | None:
        """The kept events of a streamed response (running, or finished a moment ago)."""
        job = self._jobs.get(response_id)
        if job is not None:
            return job.events
        self._prune_logs()
        return self._finished_logs.get(response_id)

    # -- one response ---------------------------------------------------------------------

    async def _run(self, job: BackgroundJob) -> None:
        final: dict[str, Any] | None = None
        try:
            with job.scope:
                async with self._slots:
                    job.started = True
                    self.stats.record_started(trio.current_time() - job.queued_at)
                    await self._write(job, job.snapshot("in_progress"))
                    final = await self._work(job)
        finally:
            with trio.CancelScope(shield=True):
                if final is None:
                    final = self._ended_early(job)
                await self._write_final(job, final)

    async def _work(self, job: BackgroundJob) -> dict[str, Any] | None:
        """Run the request through the pipeline; the final (internal) response object."""
        assert self._pipeline is not None
        codec = job.codec
        assert job.request is not None
        request = background_request(job.request)
        job.request = None  # the body need not outlive the call
        try:
            reply = await self._pipeline.handle(request, codec, trio.current_time(), job.tenant)
        except ProxyError as exc:  # what a foreground call would have answered with
            chunk = codec.stream().error(exc)
            if job.events is not None:
                job.events.append(chunk)
            return codec.final
        except Exception:
            log.exception("background response %s failed unexpectedly", job.response_id)
            return job.snapshot("failed", _error("The gateway failed unexpectedly."))
        del request
        if isinstance(reply, StreamReply):
            try:
                async for chunk in reply.body:
                    if job.events is not None:
                        job.events.append(chunk)
            finally:
                aclose = getattr(reply.body, "aclose", None)
                if aclose is not None:
                    with trio.CancelScope(shield=True):
                        await aclose()
                reply.close()
        return codec.final

    def _ended_early(self, job: BackgroundJob) -> dict[str, Any]:
        if job.cancel_requested:
            return job.snapshot("cancelled")
        message = _SHUT_DOWN_RUNNING if job.started else _SHUT_DOWN_QUEUED
        return job.snapshot("failed", _error(message))

    async def _write(self, job: BackgroundJob, response: dict[str, Any]) -> bool:
        try:
            await self._store.put(job.record(response))
        except StoreUnavailable as exc:
            log.warning("could not store background response %s: %s", job.response_id, exc)
            return False
        return True

    async def _write_final(self, job: BackgroundJob, final: dict[str, Any]) -> None:
        """Store the final object and end the job, whatever the store does (shielded)."""
        try:
            # The lease goes only once the final object is stored: else it lapses, and the
            # sweep (of this process or the next) marks the response failed.
            with trio.move_on_after(_FINAL_WRITE_S):
                if await self._write(job, final):
                    with contextlib.suppress(StoreUnavailable):
                        await self._store.release(job.response_id)
        finally:
            if job.events is not None:
                job.events.finish()
                self._finished_logs[job.response_id] = job.events
                self._prune_logs()
            if self._jobs.pop(job.response_id, None) is not None:
                self.stats.record_finished(str(final.get("status")), started=job.started)
            if not self._jobs:
                self._empty.set()
            job.done.set()

    # -- leases ---------------------------------------------------------------------------

    async def _renew(self) -> None:
        try:
            await self._store.lease(list(self._jobs), self.runner_id, time.time() + LEASE_S)
        except StoreUnavailable as exc:
            log.warning("could not renew the background responses' leases: %s", exc)

    async def _sweep(self) -> None:
        try:
            failed = await self._store.fail_orphans(time.time(), _ORPHANED)
        except StoreUnavailable as exc:
            log.warning("could not check for orphaned background responses: %s", exc)
            return
        if failed:
            log.warning(
                "marked %d background responses failed: the process running them stopped",
                failed,
            )

    def _prune_logs(self) -> None:
        now = trio.current_time()
        logs = self._finished_logs
        while logs:
            oldest = next(iter(logs.values()))
            finished_at = oldest.finished_at or now
            if len(logs) <= MAX_FINISHED_LOGS and now - finished_at < KEEP_FINISHED_S:
                break
            logs.popitem(last=False)


def _error(message: str) -> dict[str, Any]:
    return {"code": "server_error", "message": message}
