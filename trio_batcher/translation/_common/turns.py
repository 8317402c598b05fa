"""The turn builder both dialects convert a conversation with: strict alternation, tool call
pairing and the final prefill, written once.

Theory of operation: a dialect walks its conversation (Chat's ``messages``, Responses'
items) oldest first, lifts system and developer content out itself, and hands each piece to
``Turns``: blocks of a user turn (``add_user``), blocks and calls of an assistant turn
(``add_assistant``, ``add_call``), answers to calls (``answer``). A *turn* is a run of
pieces of one role, so two user messages with a system message between them still form one
user turn, and Anthropic gets the strictly alternating ``messages`` it requires, each user
turn's ``tool_result`` blocks first.

Tool pairing is checked the way both APIs enforce it: an answer must answer a call of the
assistant turn right before its turn, once, and every call must be answered in the next
turn. A final assistant turn is a prefill: its trailing whitespace is cut (Anthropic rejects
it), and a turn left empty is dropped. The checks are the same for both dialects; only the
words differ, so each brings its ``Wording`` and every error names its own paths.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, final

from ...errors import invalid_request
from .content import Block

__all__ = ["Turn", "Turns", "Wording"]


@final
@dataclass(frozen=True)
class Wording:
    """A dialect's words for the errors of the turn rules.

    Attributes:
      unanswered: a call never answered, formatted with ``call_id`` (the upstream id).
      stray: an answer to no call of the turn right before it, formatted with ``shown``
        (the id or name as the client wrote it); ``stray_later`` is appended when the call
        is further back, else ``"."``.
      twice: an answer given twice, formatted with ``shown``.
      nothing: the whole conversation had no content; ``nothing_param`` is where.
    """

    unanswered: str
    stray: str
    stray_later: str
    twice: str
    nothing: str
    nothing_param: str


@dataclass
class Turn:
    role: Literal["user", "assistant"]
    blocks: list[Block] = field(default_factory=list)
    results: list[Block] = field(default_factory=list)  # tool_result blocks (user turns)
    # assistant turns: tool_use id → param of the call, for "never answered" errors
    calls: dict[str, str] = field(default_factory=dict)
    # assistant turns: calls answered by name rather than id (Chat's legacy function_call)
    by_name: dict[str, list[str]] = field(default_factory=dict)
    answered: set[str] = field(default_factory=set)
    empty_param: str | None = None  # first user piece of the turn that had no content
    last_param: str | None = None  # the last piece that added to an assistant turn


@final
class Turns:
    """The turns of one conversation, built piece by piece (see the module docstring)."""

    def __init__(self, wording: Wording) -> None:
        self._wording = wording
        self.turns: list[Turn] = []

    def turn(self, role: Literal["user", "assistant"]) -> Turn:
        """The current turn of ``role``; a new one (closing the last) if the role changes."""
        if self.turns and self.turns[-1].role == role:
            return self.turns[-1]
        self._close_turn()
        self.turns.append(Turn(role))
        return self.turns[-1]

    def previous_assistant(self) -> Turn | None:
        """The assistant turn right before the current user turn, if there is one."""
        if len(self.turns) >= 2 and self.turns[-1].role == "user":
            return self.turns[-2]
        return None

    def add_user(self, blocks: list[Block], param: str) -> None:
        """The blocks of the user piece whose content is at ``param`` (none: blank)."""
        turn = self.turn("user")
        if not blocks and turn.empty_param is None:
            turn.empty_param = param
        turn.blocks.extend(blocks)

    def add_assistant(self, blocks: list[Block], param: str) -> Turn:
        """Blocks of the assistant piece at ``param``; its turn, for calls to follow."""
        turn = self.turn("assistant")
        turn.blocks.extend(blocks)
        turn.last_param = param
        return turn

    def add_call(self, turn: Turn, block: Block, param: str) -> None:
        """A ``tool_use`` block of ``turn``, the call at ``param`` (named if unanswered)."""
        turn.calls[block["id"]] = param
        turn.blocks.append(block)

    def answer(self, call_id: str, param: str, shown: str) -> Block:
        """The ``tool_result`` for ``call_id``, placed in the current user turn; the caller
        adds its ``content``.

        Raises:
          ProxyError: 400 naming ``param`` when no call of the assistant turn right before
            is ``call_id``, or when it was answered already.
        """
        turn = self.turn("user")
        previous = self.previous_assistant()
        words = self._wording
        if previous is None or call_id not in previous.calls:
            earlier = any(call_id in t.calls for t in self.turns[:-2])
            raise invalid_request(
                words.stray.format(shown=shown) + (words.stray_later if earlier else "."),
                param=param,
            )
        if call_id in turn.answered:
            raise invalid_request(words.twice.format(shown=shown), param=param)
        turn.answered.add(call_id)
        result: Block = {"type": "tool_result", "tool_use_id": call_id}
        turn.results.append(result)
        return result

    def finish(self) -> str | None:
        """Close the conversation: the last user turn's checks, every call of a final
        assistant turn answered (it cannot be), the prefill's trailing whitespace cut.
        Returns the path of the piece that ends a final assistant turn (a prefill), if any.

        Raises:
          ProxyError: 400 for an unanswered call, an empty user turn, or no content at all.
        """
        self._close_turn()
        if self.turns and self.turns[-1].role == "assistant":
            self._check_answered(self.turns[-1], set())
        last_assistant = self._strip_final_prefill()
        if not self.turns:
            raise invalid_request(self._wording.nothing, param=self._wording.nothing_param)
        return last_assistant

    def messages(self) -> list[dict[str, Any]]:
        """Anthropic's ``messages``: each turn's tool results first, then its blocks."""
        return [{"role": t.role, "content": t.results + t.blocks} for t in self.turns]

    def _close_turn(self) -> None:
        """Checks that need a whole user turn: content present, every call answered."""
        if not self.turns or self.turns[-1].role != "user":
            return
        turn = self.turns[-1]
        if not turn.blocks and not turn.results:
            raise invalid_request(
                "A user message must have non-empty content.", param=turn.empty_param
            )
        previous = self.previous_assistant()
        if previous is not None:
            self._check_answered(previous, turn.answered)

    def _check_answered(self, assistant: Turn, answered: set[str]) -> None:
        for call_id, param in assistant.calls.items():
            if call_id not in answered:
                raise invalid_request(self._wording.unanswered.format(call_id=call_id), param=param)

    def _strip_final_prefill(self) -> str | None:
        """A final assistant turn is a prefill: Anthropic rejects its trailing whitespace."""
        if not self.turns or self.turns[-1].role != "assistant":
            return None
        turn = self.turns[-1]
        if turn.blocks and turn.blocks[-1]["type"] == "text":
            text = turn.blocks[-1]["text"].rstrip()
            if text:
                turn.blocks[-1] = {**turn.blocks[-1], "text": text}
            else:
                turn.blocks.pop()
        if not turn.blocks:
            self.turns.pop()
            return None
        return turn.last_param
