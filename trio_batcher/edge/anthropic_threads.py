"""Message threads (beta ``message-threads-2026-08-12``) through the native Messages door,
each thread owned by the tenant that created it.

A thread lives at Anthropic, under the gateway's *one* upstream key: a request with
``thread: {"type": "create"}`` asks the upstream to hold the conversation under the reply's
``id``, and ``{"type": "continue", "previous_message_id": id}`` sends only the new messages
and has the upstream prepend what it holds. Passed through as it is, any tenant that learnt
another's message id could continue -- and so read -- that tenant's conversation. So:

- **create**: once the reply exists (its JSON, or a stream's ``message_start``: the
  request's ``on_reply`` hook, which the pipeline calls), its id is recorded in
  ``store.owned`` as a ``"thread"`` owned by the sender's tenant, on the upstream that
  served it.
- **continue**: ``previous_message_id`` must be a thread the sender owns. Unknown or
  another tenant's, it is answered exactly as Anthropic answers a thread it does not hold
  -- 404 ``not_found_error`` with ``error.details.error_code: "thread_not_found"`` -- and
  never reaches the upstream; the ``anthropic`` SDKs' tool runner then replays the whole
  conversation under a new thread, so a lost record costs a replay, not a failure. A
  thread it owns is continued on the upstream that holds it (``UpstreamRequest.pinned``:
  no other upstream is eligible), and the new reply is recorded the same way, so the chain
  stays the tenant's.

Only a request that names the threads beta is handled here; a ``thread`` without it is
relayed as before (the upstream refuses it). The OpenAI doors never send one.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import replace
from functools import partial
from typing import Any, Final, final

from ..errors import ProxyError
from ..store.owned import OwnedObjects
from ..upstream.request import UpstreamRequest

__all__ = [
    "MESSAGE_THREADS_BETA",
    "THREAD_KIND",
    "THREAD_NOT_FOUND",
    "ThreadOwnership",
    "ThreadRequest",
    "thread_not_found",
    "thread_request",
    "with_details",
]

log = logging.getLogger(__name__)

MESSAGE_THREADS_BETA: Final = "message-threads-2026-08-12"
THREAD_KIND: Final = "thread"
_FAMILY: Final = "message-threads-"  # any dated version of the beta


THREAD_NOT_FOUND: Final = "thread_not_found"


def thread_not_found() -> ProxyError:
    """Anthropic's 404 for a thread it does not hold, with the ``error_code`` the SDKs read
    (``ThreadNotFoundError``) to replay the conversation under a new thread."""
    return ProxyError(
        404,
        "No usable Thread state was found for `previous_message_id`. Replay the full "
        'conversation with `thread: {"type": "create"}` to start a new Thread.',
        type="not_found_error",
        code=THREAD_NOT_FOUND,
    )


def with_details(body: bytes, exc: ProxyError) -> bytes:
    """An Anthropic error ``body`` with ``error.details.error_code`` added for the
    gateway's own ``thread_not_found``; any other error's body as it is."""
    if exc.code != THREAD_NOT_FOUND or exc.upstream_status is not None:
        return body
    parsed = json.loads(body)
    parsed["error"]["details"] = {"error_code": THREAD_NOT_FOUND}
    return json.dumps(parsed, separators=(",", ":"), ensure_ascii=False).encode()


@final
class ThreadRequest:
    """A request's ``thread``: ``previous`` is the id a ``continue`` continues (None for a
    ``create``)."""

    __slots__ = ("previous",)

    def __init__(self, previous: str | None) -> None:
        self.previous = previous


def thread_request(payload: object, headers: Iterable[tuple[bytes, bytes]]) -> ThreadRequest | None:
    """The request's thread when it has one under the threads beta; None otherwise.

    Raises:
      ProxyError: 400 ``invalid_request_error`` for a malformed ``thread`` (before any
        upstream call).
    """
    if not isinstance(payload, Mapping) or payload.get("thread") is None:
        return None
    if not _names_threads_beta(headers):
        return None  # relayed as it is: the upstream decides
    thread = payload["thread"]
    kind = thread.get("type") if isinstance(thread, Mapping) else None
    if kind == "create":
        return ThreadRequest(None)
    if kind == "continue":
        previous = thread.get("previous_message_id")
        if isinstance(previous, str) and previous:
            return ThreadRequest(previous)
        raise _bad("thread.previous_message_id: a message id (a string) is required")
    raise _bad(
        'thread: expected {"type": "create"} or {"type": "continue", '
        '"previous_message_id": "msg_..."}'
    )


def _bad(message: str) -> ProxyError:
    return ProxyError(400, message, type="invalid_request_error", param="thread")


def _names_threads_beta(headers: Iterable[tuple[bytes, bytes]]) -> bool:
    for name, value in headers:
        if name.lower() == b"anthropic-beta":
            for item in value.decode("latin-1").split(","):
                if item.strip().startswith(_FAMILY):
                    return True
    return False


@final
class ThreadOwnership:
    """Who owns each thread (module doc), kept in ``store.owned``."""

    def __init__(self, owned: OwnedObjects) -> None:
        self._owned = owned

    async def holder(self, thread: ThreadRequest, owner: str) -> str | None:
        """The upstream that holds the thread a ``continue`` continues (None for a
        ``create``: any the route picks).

        Raises:
          ProxyError: ``thread_not_found()`` when it continues a thread ``owner`` does not
            own (unknown, or another tenant's: answered alike).
        """
        if thread.previous is None:
            return None
        held = await self._owned.get(THREAD_KIND, thread.previous, owner)
        if held is None:
            raise thread_not_found()
        return held.upstream

    def attach(self, request: UpstreamRequest, owner: str, pinned: str | None) -> UpstreamRequest:
        """``request`` pinned to ``pinned`` (the thread's upstream) and told to record its
        reply as ``owner``'s thread."""
        # Only Anthropic's own API holds threads: no bedrock or vertex upstream may take it.
        only = request.anthropic_only or "message threads"
        return replace(
            request, pinned=pinned, on_reply=partial(self._record, owner), anthropic_only=only
        )

    async def _record(self, owner: str, message_id: str, upstream: str) -> None:
        """The reply ``message_id`` is the head of a thread of ``owner``'s on ``upstream``.

        A failure to record is logged, not raised: the reply is good, and a continue that
        then finds no record gets ``thread_not_found``, from which the SDKs recover."""
        meta: dict[str, Any] = {}
        try:
            await self._owned.record(THREAD_KIND, message_id, owner, upstream, meta)
        except Exception as exc:  # the reply itself must not fail
            log.warning("could not record the thread %s: %s", message_id, exc)
