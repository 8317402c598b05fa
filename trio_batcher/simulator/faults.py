"""Fault injection: what should go wrong with this request.

Two sources, merged per request:

* configured rates (``error_rate``, ``rate_429``, ``rate_529``): one uniform draw per request
  from the simulator's seeded RNG picks at most one status;
* directives ``k=v,k=v``, either in an ``x-sim-fault`` header or embedded as
  ``[[sim:k=v,...]]`` in the text of the last user message. The embedded form survives a
  proxy that does not forward arbitrary headers; it is stripped from the text the reply
  echoes. Embedded directives override the header, key by key.

A directive with an unknown key or a bad value is a 400, so a typo in a test fails loudly
instead of silently testing nothing.

``times=N`` makes a directive transient, so a client's retry can succeed: only the first N
requests carrying it are faulted; later ones are served as if it were absent (all of its
keys, latency overrides included). Requests are matched by the directive's canonical text
(``Faults.describe()`` of the merged header and embedded directives, ``times`` included),
counted in the app's state from the first request or the last ``/_sim/reset``; add
``tag=<word>`` to give otherwise identical directives separate counts. A request refused
before faults apply (rate limit, overload window) does not use one up.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, Final, final

from .config import SimulatorConfig
from .errors import SimulatorInvalidRequest

DIRECTIVE: Final = re.compile(r"\[\[sim:([^\]]*)\]\]")
FAULT_HEADER: Final = "x-sim-fault"


@final
@dataclass(frozen=True, slots=True)
class Faults:
    """Per-request overrides; ``None`` / ``False`` means "not requested".

    Attributes:
      status: answer with this error status instead of a reply.
      retry_after: ``retry-after`` seconds for a 429/529.
      ttft_ms: time to first token for this request.
      tokens_per_s: output rate for this request.
      tokens: reply length in tokens (text replies).
      hang: never answer; the request ends only when the client goes away.
      stream_error_after: in a stream, send an ``overloaded_error`` event after this many
        content deltas, in place of the next content event (with 0: right after
        ``message_start``, before any block), or in place of ``message_delta`` if the reply
        is shorter, and stop.
      stream_error_first: in a stream, send the error event first, before ``message_start``.
      stream_end_after: in a stream, end the body cleanly after this many content deltas
        (before the next content event; with 0, right after ``message_start``), with no
        error, ``message_delta`` or ``message_stop``: a stream cut short by something
        between the client and the API.
      no_retry_after: send a 429/529 without ``retry-after`` (as a spend limit does).
      times: fault only the first ``times`` requests carrying this directive.
      tag: no effect but to tell otherwise identical ``times`` directives apart.
    """

    status: int | None = None
    retry_after: float | None = None
    ttft_ms: float | None = None
    tokens_per_s: float | None = None
    tokens: int | None = None
    hang: bool = False
    stream_error_after: int | None = None
    stream_error_first: bool = False
    stream_end_after: int | None = None
    no_retry_after: bool = False
    times: int | None = None
    tag: str | None = None

    def merged(self, other: Faults) -> Faults:
        """``self`` with every field ``other`` sets taken from ``other``."""
        if other is NO_FAULTS:
            return self
        changes = {}
        for f in fields(other):
            value = getattr(other, f.name)
            if value is not None and value is not False:
                changes[f.name] = value
        return replace(self, **changes) if changes else self

    def describe(self) -> str:
        """The directive that reproduces these faults (``"status=429,retry_after=2"``)."""
        parts = []
        for f in fields(self):
            value = getattr(self, f.name)
            if value is True:
                parts.append(f"{f.name}=1")
            elif value is not None and value is not False:
                parts.append(
                    f"{f.name}={value:g}" if isinstance(value, float) else f"{f.name}={value}"
                )
        return ",".join(parts)

    def latency_config(self, config: SimulatorConfig) -> SimulatorConfig:
        """``config`` with this request's latency overrides applied."""
        changes: dict[str, float] = {}
        if self.ttft_ms is not None:
            changes["ttft_ms"] = self.ttft_ms
        if self.tokens_per_s is not None:
            changes["tokens_per_s"] = self.tokens_per_s
        return replace(config, **changes) if changes else config  # type: ignore[arg-type]


NO_FAULTS: Final = Faults()


def _flag(value: str) -> bool:
    lowered = value.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError(value)


def _status(value: str) -> int:
    status = int(value)
    if not 100 <= status <= 599:
        raise ValueError(value)
    return status


def _non_negative_float(value: str) -> float:
    number = float(value)
    if not number >= 0 or number == float("inf"):
        raise ValueError(value)
    return number


def _non_negative_int(value: str) -> int:
    number = int(value)
    if number < 0:
        raise ValueError(value)
    return number


_TAG: Final = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def _tag(value: str) -> str:
    if not _TAG.fullmatch(value):
        raise ValueError(value)
    return value


_PARSERS: Final[Mapping[str, Callable[[str], Any]]] = {
    "status": _status,
    "retry_after": _non_negative_float,
    "ttft_ms": _non_negative_float,
    "tokens_per_s": _non_negative_float,
    "tokens": _non_negative_int,
    "hang": _flag,
    "stream_error_after": _non_negative_int,
    "stream_error_first": _flag,
    "stream_end_after": _non_negative_int,
    "no_retry_after": _flag,
    "times": _non_negative_int,
    "tag": _tag,
}


def parse_faults(spec: str, *, source: str = FAULT_HEADER) -> Faults:
    """Parse ``"k=v,k=v"``.

    Raises:
      SimulatorInvalidRequest: unknown key, missing ``=``, or a bad value; the message
        names ``source``.
    """
    values: dict[str, Any] = {}
    for item in spec.split(","):
        item = item.strip()
        if not item:
            continue
        key, sep, raw = item.partition("=")
        key, raw = key.strip(), raw.strip()
        parser = _PARSERS.get(key)
        if parser is None or not sep:
            known = ", ".join(_PARSERS)
            raise SimulatorInvalidRequest(f"{source}: unknown fault {item!r} (known: {known})")
        try:
            values[key] = parser(raw)
        except ValueError:
            raise SimulatorInvalidRequest(f"{source}: bad value for {key}: {raw!r}") from None
    return Faults(**values) if values else NO_FAULTS


def last_user_texts(body: Mapping[str, Any]) -> list[str]:
    """The texts of the last user message: string content, text blocks, tool results."""
    messages = body["messages"]
    for message in reversed(messages):
        if message["role"] != "user":
            continue
        content = message["content"]
        if isinstance(content, str):
            return [content]
        texts: list[str] = []
        for block in content:
            kind = block["type"]
            if kind == "text":
                texts.append(block["text"])
            elif kind == "tool_result":
                inner = block.get("content")
                if isinstance(inner, str):
                    texts.append(inner)
                elif isinstance(inner, list):
                    texts.extend(b["text"] for b in inner if b.get("type") == "text")
        return texts
    return []


def embedded_faults(body: Mapping[str, Any]) -> Faults:
    """Faults from ``[[sim:...]]`` directives in the last user message of a valid body."""
    faults = NO_FAULTS
    for text in last_user_texts(body):
        if "[[sim:" not in text:
            continue
        for match in DIRECTIVE.finditer(text):
            faults = faults.merged(parse_faults(match.group(1), source=match.group(0)))
    return faults


def strip_directives(text: str) -> str:
    """``text`` without ``[[sim:...]]`` directives."""
    return DIRECTIVE.sub("", text) if "[[sim:" in text else text


def draw_status(config: SimulatorConfig, rng: random.Random) -> int | None:
    """The configured-rate fault for one request, if any (one draw when any rate is set)."""
    if not (config.rate_429 or config.rate_529 or config.error_rate):
        return None
    u = rng.random()
    if u < config.rate_429:
        return 429
    u -= config.rate_429
    if u < config.rate_529:
        return 529
    u -= config.rate_529
    if u < config.error_rate:
        return 500
    return None
