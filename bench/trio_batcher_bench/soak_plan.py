"""The soak's traffic: which request arrives when, through which door, with which fault.

Pure (no I/O, no clock): ``arrivals`` yields the whole open-loop schedule -- a steady base
rate with bursts above the gate's capacity on top -- and ``Mix.plan`` turns each arrival
into a ``Planned`` request, drawn from one seeded RNG, so a run is reproducible request
for request. What each request carries:

- a **door and shape**: OpenAI Chat or OpenAI Responses (stream or not, with or without
  tools) or Anthropic Messages (stream or not), in the shares of ``KINDS``; a Responses
  request asks to be stored (``store: true``) one time in ``STORE_EVERY``, so the store's
  path runs without every request writing to disk;
- at most one **fault** the simulator injects (a ``[[sim:...]]`` directive in the prompt,
  see ``simulator/faults.py``): a 500, a hang, a stall, a slow drip, an ``error`` event or a
  cut in mid-stream; and on a schedule, once per period, a 429 with ``retry-after`` or a 529
  with ``retry-after`` (each of which holds the whole gateway for a moment, so they are
  timed, not drawn). The simulator's own 529 overload windows come on top, for every
  request that falls in them;
- or a way for its **client to leave**: before its body is fully sent (closing, or
  resetting the connection mid-body), while queued or in flight (after a delay, on a call
  the simulator is told to hold for ``HELD_CALL_MS``, so the leaving always comes first),
  or mid-stream (after a few content events of a slow stream).

Bursts carry neither faults nor leaves, and no request near a burst resets its
connection or leaves in flight: under a burst the proxy may be far enough behind that a
timed leave could cross an answer already decided, or a reset could discard a request the
proxy had not read yet, which would make the count ambiguous (see ``soak_checks``).
"""

from __future__ import annotations

import heapq
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final, Literal, TypeAlias, final

from .processes import SIM_KEY
from .sse import Api
from .wire import encode_request

__all__ = [
    "FAULTS",
    "HELD_CALL_MS",
    "KINDS",
    "LEAVES",
    "STORE_EVERY",
    "Arrival",
    "Leave",
    "Mix",
    "Planned",
    "arrivals",
]

MODEL: Final = "claude-sonnet-4-5"
MAX_TOKENS: Final = 12
HELD_CALL_MS: Final = 3000  # a call whose client leaves while queued or in flight
LEAVE_AFTER_S: Final = (0.5, 1.5)  # ... leaves after a delay drawn in this range
RESET_AFTER_S: Final = (0.1, 0.3)  # a reset comes this long after half the body
# No reset or in-flight leave this close to a burst (s before, s after): a burst can put
# the proxy that far behind, and then those leaves become ambiguous (see soak_checks).
BURST_QUIET_S: Final = (1.5, 4.0)

Stage: TypeAlias = Literal["before_body", "reset_mid_body", "in_flight", "mid_stream"]

# name -> (share of requests, door, stream, tools). Streams are 42.5% of the whole, as they
# were with two doors, so the stream-only faults and leaves weigh the same.
KINDS: Final[dict[str, tuple[float, Api, bool, bool]]] = {
    "chat": (0.20, "openai", False, False),
    "chat-stream": (0.15, "openai", True, False),
    "chat-tools": (0.05, "openai", False, True),
    "chat-tools-stream": (0.05, "openai", True, True),
    "responses": (0.10, "responses", False, False),
    "responses-stream": (0.075, "responses", True, False),
    "responses-tools": (0.05, "responses", False, True),
    "responses-tools-stream": (0.025, "responses", True, True),
    "messages": (0.175, "anthropic", False, False),
    "messages-stream": (0.125, "anthropic", True, False),
}
STORE_EVERY: Final = 5  # one Responses request in this many is sent with store: true

# name -> (share of requests, directive, streams only, may answer 5xx). Drawn per request,
# at most one fault or one leave each; a stream-only draw on a non-stream request is none.
FAULTS: Final[dict[str, tuple[float, str, bool, bool]]] = {
    "status_500": (0.005, "status=500", False, True),
    "hang": (0.0005, "hang=1", False, True),
    "stall": (0.005, "ttft_ms=1500", False, False),
    "drip": (0.02, "tokens=20,tokens_per_s=25", True, False),
    "stream_error": (0.02, "stream_error_after=3", True, True),
    "stream_cut": (0.01, "stream_end_after=3", True, True),
}
# Timed faults: (period s, offset s, directive, may answer 5xx).
SCHEDULED: Final[dict[str, tuple[float, float, str, bool]]] = {
    "rate_limited": (20.0, 5.0, "status=429,retry_after=1", False),
    "overloaded": (30.0, 15.0, "status=529,retry_after=1", True),
}
# name -> (share of requests, streams only)
LEAVES: Final[dict[Stage, tuple[float, bool]]] = {
    "before_body": (0.006, False),
    "reset_mid_body": (0.004, False),
    "in_flight": (0.010, False),
    "mid_stream": (0.030, True),
}
_WEATHER: Final = {
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}
_TOOLS_OPENAI: Final = [{"type": "function", "function": _WEATHER}]
_TOOLS_RESPONSES: Final = [{"type": "function", **_WEATHER}]  # flat, strict by default
PROMPT: Final = "Soak request: reply with a few words."
TOOL_PROMPT: Final = "Soak request: get the weather in Paris."


def faults_that_may_5xx() -> frozenset[str]:
    """Fault names whose request may be answered with a 5xx (or a stream error)."""
    drawn = {name for name, (_, _, _, may) in FAULTS.items() if may}
    timed = {name for name, (_, _, _, may) in SCHEDULED.items() if may}
    return frozenset(drawn | timed)


@final
@dataclass(frozen=True, slots=True)
class Leave:
    """How a client leaves: at ``stage``, after ``after_s`` seconds (``before_body``,
    ``reset_mid_body``: after sending half the body; ``in_flight``: after sending it all)
    or after ``after_events`` content events (``mid_stream``)."""

    stage: Stage
    after_s: float = 0.0
    after_events: int = 0


@final
@dataclass(frozen=True, slots=True)
class Planned:
    """One request of the soak, encoded, and what was done to it on purpose."""

    index: int
    kind: str
    api: Api
    stream: bool
    burst: bool
    fault: str | None
    leave: Leave | None
    request: bytes
    body_offset: int  # where the body starts in ``request``
    store: bool = False  # a Responses request sent with ``store: true``


@final
@dataclass(frozen=True, slots=True, order=True)
class Arrival:
    """An intended send time (seconds from the start) and whether it belongs to a burst."""

    at: float
    burst: bool


def arrivals(
    seconds: float, rate: float, burst_every_s: float, burst_size: int, burst_spread_s: float
) -> Iterator[Arrival]:
    """The base arrivals at ``i / rate`` merged with a burst of ``burst_size`` arrivals
    within ``burst_spread_s`` every ``burst_every_s`` (the first half a period in)."""

    def base() -> Iterator[Arrival]:
        i = 0
        while (at := i / rate) < seconds:
            yield Arrival(at, False)
            i += 1

    def bursts() -> Iterator[Arrival]:
        start = burst_every_s / 2
        while burst_every_s > 0 and start < seconds:
            for j in range(burst_size):
                yield Arrival(start + burst_spread_s * j / burst_size, True)
            start += burst_every_s

    yield from heapq.merge(base(), bursts())


@final
class Mix:
    """Turns arrivals into planned requests for the proxy at ``host:port``."""

    def __init__(self, host: str, port: int, seed: int = 14, burst_every_s: float = 0) -> None:
        self._host, self._port = host, port
        self._burst_every_s = burst_every_s
        self._rng = random.Random(seed)
        self._index = 0
        self._responses = 0  # Responses requests planned so far
        self._slots = dict.fromkeys(SCHEDULED, -1)
        self._kinds = list(KINDS)
        self._weights = [share for share, *_ in KINDS.values()]

    def plan(self, arrival: Arrival) -> Planned:
        rng = self._rng
        kind = rng.choices(self._kinds, self._weights)[0]
        _, api, stream, tools = KINDS[kind]
        fault: str | None = None
        leave: Leave | None = None
        directive = ""
        if not arrival.burst:
            fault = self._scheduled(arrival.at)
            if fault is not None:
                directive = SCHEDULED[fault][2]
            else:
                fault, leave, directive = self._draw(stream)
                if leave is not None and leave.stage in _TIMED and self._near_burst(arrival.at):
                    leave, directive = None, ""
        index = self._index
        self._index += 1
        text = TOOL_PROMPT if tools else PROMPT
        if directive:
            text = f"[[sim:{directive}]] {text}"
        max_tokens = (
            64 if (leave is not None and leave.stage == "mid_stream") or fault else MAX_TOKENS
        )
        store = False
        if api == "responses":
            store = self._responses % STORE_EVERY == 0
            self._responses += 1
        request, offset = self._encode(api, stream, tools, text, max_tokens, store)
        return Planned(
            index, kind, api, stream, arrival.burst, fault, leave, request, offset, store
        )

    def _near_burst(self, at: float) -> bool:
        every = self._burst_every_s
        if every <= 0:
            return False
        before, after = BURST_QUIET_S
        since = (at - every / 2) % every  # seconds since the last burst started
        return since <= after or every - since <= before

    def _scheduled(self, at: float) -> str | None:
        for name, (period, offset, _, _) in SCHEDULED.items():
            slot = int((at - offset) // period) if at >= offset else -1
            if slot > self._slots[name]:
                self._slots[name] = slot
                return name
        return None

    def _draw(self, stream: bool) -> tuple[str | None, Leave | None, str]:
        rng = self._rng
        u = rng.random()
        for stage, (share, streams_only) in LEAVES.items():
            if u < share:
                if streams_only and not stream:
                    return None, None, ""
                return None, self._leave(stage), _leave_directive(stage)
            u -= share
        for name, (share, directive, streams_only, _) in FAULTS.items():
            if u < share:
                if streams_only and not stream:
                    return None, None, ""
                return name, None, directive
            u -= share
        return None, None, ""

    def _leave(self, stage: Stage) -> Leave:
        rng = self._rng
        if stage == "mid_stream":
            return Leave(stage, after_events=rng.randint(1, 5))
        if stage == "in_flight":
            return Leave(stage, after_s=rng.uniform(*LEAVE_AFTER_S))
        if stage == "reset_mid_body":
            return Leave(stage, after_s=rng.uniform(*RESET_AFTER_S))
        return Leave(stage, after_s=rng.uniform(0.0, 0.05))

    def _encode(
        self, api: Api, stream: bool, tools: bool, text: str, max_tokens: int, store: bool
    ) -> tuple[bytes, int]:
        messages = [{"role": "user", "content": text}]
        body: dict[str, object]
        headers = [("content-type", "application/json")]
        if api == "anthropic":
            body = {"model": MODEL, "max_tokens": max_tokens, "messages": messages}
            headers += [("x-api-key", SIM_KEY), ("anthropic-version", "2023-06-01")]
            path = "/v1/messages"
        elif api == "responses":
            body = {"model": MODEL, "max_output_tokens": max_tokens, "input": text, "store": store}
            if tools:
                body["tools"] = _TOOLS_RESPONSES
            path = "/v1/responses"
        else:
            body = {"model": MODEL, "max_completion_tokens": max_tokens, "messages": messages}
            if tools:
                body["tools"] = _TOOLS_OPENAI
            path = "/v1/chat/completions"
        if stream:
            body["stream"] = True
        data = json.dumps(body, separators=(",", ":")).encode()
        request = encode_request("POST", self._host, self._port, path, headers, data)
        return request, len(request) - len(data)


_TIMED: Final = frozenset({"in_flight", "reset_mid_body"})


def _leave_directive(stage: Stage) -> str:
    if stage == "in_flight":
        return f"ttft_ms={HELD_CALL_MS}"
    if stage == "mid_stream":
        return "tokens=40,tokens_per_s=50"
    return ""
