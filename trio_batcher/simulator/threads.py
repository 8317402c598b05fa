"""Message threads (beta ``message-threads-2026-08-12``): conversations held between turns.

With ``thread: {"type": "create"}`` the API holds the conversation -- the request's
create-only fields (``system``, ``tools``) and its messages, plus the reply -- under the
reply's ``id``. A later request with ``thread: {"type": "continue", "previous_message_id":
...}`` sends only the new messages and none of the create-only fields: the API prepends
the held history and uses the held fields, and holds the result under the new reply's id.
The ``anthropic`` SDKs' default tool runner works this way, so without it the second turn
of every tool loop (a ``tool_result`` whose ``tool_use`` the request itself lacks) is a 400.

The errors are the API's, with ``error.details.error_code``, which the SDK branches on:
an unknown (or forgotten) id is a 404 ``thread_not_found`` -- the SDK then replays the
whole conversation under a new thread -- and a reply continued twice a 400
``thread_already_continued``. A continue that repeats a create-only field is a 400.

Bounded: the ``THREAD_ENTRIES`` most recently used threads are held, the oldest forgotten
first (a forgotten thread is simply "not found", which the SDK recovers from). Pure: no
I/O, no clock.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, final

from .errors import SimulatorError, SimulatorInvalidRequest

__all__ = ["CREATE_ONLY_FIELDS", "THREAD_ENTRIES", "ThreadStore", "ThreadTurn"]

THREAD_ENTRIES: Final = 1024
CREATE_ONLY_FIELDS: Final = ("system", "tools")
"""Fields a thread keeps from its ``create``: a ``continue`` may not send them."""


@final
@dataclass(slots=True)
class _Held:
    """One held reply: the thread's create-only fields and its whole history, the reply
    included; ``continued`` once a later turn continued from it (each reply only once)."""

    fields: dict[str, Any]
    messages: list[Any]
    continued: bool = False


@final
@dataclass(frozen=True, slots=True)
class ThreadTurn:
    """A request's turn on a thread: what to hold once its reply exists."""

    fields: Mapping[str, Any]
    messages: list[Any]
    previous: str | None


@final
class ThreadStore:
    """The held threads of one simulator (module doc); ``clear`` on ``/_sim/reset``."""

    def __init__(self, entries: int = THREAD_ENTRIES) -> None:
        self._entries = entries
        self._held: OrderedDict[str, _Held] = OrderedDict()

    def __len__(self) -> int:
        return len(self._held)

    def clear(self) -> None:
        self._held.clear()

    def resolve(self, body: dict[str, Any]) -> tuple[dict[str, Any], ThreadTurn | None]:
        """The request as the model sees it -- a ``continue`` with the held history and
        fields put back -- and its turn (None: no ``thread``, nothing to hold).

        Raises:
          SimulatorError: 400 for a malformed ``thread`` or a ``continue`` that sends a
            create-only field or continues a reply twice; 404 ``thread_not_found``.
        """
        thread = body.get("thread")
        messages = body.get("messages")
        if thread is None or not isinstance(messages, list):
            return body, None  # no thread, or a body validation refuses anyway
        if not isinstance(thread, dict):
            raise SimulatorInvalidRequest("thread: Input should be a valid dictionary")
        kind = thread.get("type")
        if kind == "create":
            if set(thread) != {"type"}:
                raise SimulatorInvalidRequest("thread: Extra inputs are not permitted")
            fields: dict[str, Any] = {f: body[f] for f in CREATE_ONLY_FIELDS if f in body}
            return body, ThreadTurn(fields, list(messages), None)
        if kind != "continue":
            raise SimulatorInvalidRequest(
                f"thread.type: Input tag {kind!r} found using 'type' does not match any of "
                "the expected tags: 'create', 'continue'"
            )
        previous = thread.get("previous_message_id")
        if not isinstance(previous, str) or not previous:
            raise SimulatorInvalidRequest("thread.previous_message_id: Field required")
        for field in CREATE_ONLY_FIELDS:
            if field in body:
                raise SimulatorInvalidRequest(
                    f"{field}: cannot be sent with thread.type 'continue': the thread keeps "
                    f"the `{field}` it was created with"
                )
        held = self._held.get(previous)
        if held is None:
            raise SimulatorError(
                404,
                "No usable Thread state was found for `previous_message_id`. Replay the full "
                'conversation with `thread: {"type": "create"}` to start a new Thread.',
                details={"error_code": "thread_not_found"},
            )
        if held.continued:
            raise SimulatorError(
                400,
                "The response that `previous_message_id` names has already been continued, "
                "and each response can be continued only once. Continue from the Thread's "
                "most recent response `id`.",
                details={"error_code": "thread_already_continued"},
            )
        self._held.move_to_end(previous)
        history = [*held.messages, *messages]
        return {**body, **held.fields, "messages": history}, ThreadTurn(
            held.fields, history, previous
        )

    def hold(self, turn: ThreadTurn, message: Mapping[str, Any]) -> None:
        """Hold ``turn``'s history and ``message`` (the reply) under the reply's id."""
        if turn.previous is not None:
            before = self._held.get(turn.previous)
            if before is not None:
                before.continued = True
        reply = {"role": "assistant", "content": message["content"]}
        self._held[str(message["id"])] = _Held(dict(turn.fields), [*turn.messages, reply])
        while len(self._held) > self._entries:
            self._held.popitem(last=False)
