"""Shared machinery of the fuzz tests (``tests/test_fuzz_*.py``).

One proxy and one simulator per test function (``proxy_and_simulator``); hypothesis runs
its examples in a worker thread (``explore``), and each example goes back to the test's
trio loop with ``trio.from_thread.run`` to talk to the servers over loopback. So the
servers start once per property instead of once per example, and hypothesis keeps
shrinking a failure as usual.

What every property relies on:

- ``Gateway.exchange`` sends one request and returns the answer together with the
  upstream calls it caused, read off the simulator's request log (``/_sim/requests``):
  a call for an invalid body is visible there whatever the gateway answered.
- ``check_answer`` holds the invariants common to every POST door: no 5xx (nothing here
  asks the simulator for one), no upstream call for a body the gateway refused, the error
  shape of the door's dialect, and for an upstream refusal, the relay rules of
  docs/compatibility.md.
- Deterministic: ``derandomize=True`` and no example database, so CI sees the same
  examples on every run.
- Bugs the properties found are pinned by explicit regression tests next to them. One
  still open is marked ``xfail(strict=True)`` (so the marker must come off once it is
  fixed), and the property tolerates exactly that bug's signature (the OpenAI module's
  ``KNOWN_UPSTREAM_REFUSALS``), so that it keeps looking for new ones.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Final

import httpx2
import trio
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from support import proxy_and_simulator

from trio_batcher.simulator import SimulatorConfig

CHAT: Final = "/v1/chat/completions"
MESSAGES: Final = "/v1/messages"
COUNT_TOKENS: Final = "/v1/messages/count_tokens"
VERSION: Final = "2023-06-01"
# Seconds one exchange may take; loopback answers in milliseconds.
EXCHANGE_TIMEOUT: Final = 20.0
# How many of the simulator's newest log entries each read fetches.
_RECENT: Final = 8


def fuzz_settings(max_examples: int) -> settings:
    """Deterministic (no database, derandomized), no deadline: one example is a few
    loopback round trips, and the machine may be busy.

    For a longer campaign by hand: ``FUZZ_SCALE=20`` runs twenty times the examples, and
    ``FUZZ_RANDOM=1`` draws new ones on every run instead of CI's fixed sequence.
    """
    return settings(
        max_examples=max_examples * int(os.environ.get("FUZZ_SCALE", "1")),
        deadline=None,
        derandomize=not os.environ.get("FUZZ_RANDOM"),
        database=None,
        phases=(Phase.explicit, Phase.generate, Phase.shrink),
        suppress_health_check=list(HealthCheck),
        print_blob=False,
    )


async def explore(
    strategy: st.SearchStrategy[Any],
    check: Callable[[Any], Awaitable[None]],
    *,
    max_examples: int,
) -> None:
    """Run ``check`` on ``max_examples`` examples of ``strategy``, on this trio loop.

    hypothesis drives from a worker thread; each example's ``check`` runs here, where the
    servers and their clients live.
    """

    @fuzz_settings(max_examples)
    @given(strategy)
    def prop(case: Any) -> None:
        trio.from_thread.run(check, case)

    await trio.to_thread.run_sync(prop)


_RUN = re.compile(rb"(.)\1{49,}", re.DOTALL)


def compact(value: object) -> str:
    """``repr(value)`` with every run of 50 or more equal bytes or characters written as
    ``<N x 'c'>``: a failing example stays readable (and hypothesis does not warn about a
    70 kB repr, which ``filterwarnings = error`` would turn into the failure instead)."""
    text = repr(value).encode("utf-8", "backslashreplace")
    return _RUN.sub(
        lambda m: b"<%d x %r>" % (len(m.group(0)), m.group(1).decode("latin-1")), text
    ).decode("utf-8", "replace")


class Compact:
    """A mixin for example classes: ``repr`` by ``compact``."""

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={compact(v)}" for k, v in vars(self).items())
        return f"{type(self).__name__}({fields})"


# -- talking to the servers --------------------------------------------------------------


@dataclass
class Exchange:
    """One request's answer, and what reached the upstream because of it."""

    method: str
    path: str
    status: int
    headers: httpx2.Headers
    body: bytes
    upstream: list[dict[str, Any]] = field(default_factory=list)

    @property
    def calls(self) -> list[dict[str, Any]]:
        """The upstream Messages calls (``GET /v1/models`` for the catalogue is no call for
        a body)."""
        return [
            e for e in self.upstream if e["method"] == "POST" and e["path"].startswith(MESSAGES)
        ]

    def json(self) -> Any:
        return json.loads(self.body)

    def __str__(self) -> str:
        calls = [(c["path"], c["status"]) for c in self.calls]
        return f"{self.method} {self.path} -> {self.status} {self.body[:600]!r}; upstream {calls}"


@dataclass
class Gateway:
    url: str
    sim_url: str
    http: httpx2.AsyncClient
    auth: dict[str, str] = field(default_factory=dict)  # for /metrics: METRICS_TOKEN
    seen: int = 0  # the newest simulator log entry already attributed to a request

    async def new_upstream_entries(self) -> list[dict[str, Any]]:
        """The simulator's log entries since the last call (the newest few only: bodies
        can be large, and an example makes one call at most, retries being off)."""
        response = await self.http.get(f"{self.sim_url}/_sim/requests?recent={_RECENT}")
        response.raise_for_status()
        entries: list[dict[str, Any]] = response.json()["requests"]
        fresh = [e for e in entries if e["seq"] > self.seen]
        if entries:
            if self.seen:  # nothing fell between two reads
                assert len(fresh) < _RECENT, "more upstream calls than the log read shows"
            self.seen = max(self.seen, entries[-1]["seq"])
        return fresh

    async def exchange(
        self,
        method: str,
        path: str,
        content: bytes | None = None,
        headers: Sequence[tuple[bytes, bytes]] = (),
    ) -> Exchange:
        await self.new_upstream_entries()  # whatever came before is not this request's
        with trio.fail_after(EXCHANGE_TIMEOUT):
            response = await self.http.request(
                method, f"{self.url}{path}", content=content, headers=list(headers)
            )
        return Exchange(
            method,
            path,
            response.status_code,
            response.headers,
            response.content,
            await self.new_upstream_entries(),
        )

    async def raw(
        self, data: bytes, *, then: str = "read", wait: float = 5.0, head_only: bool = False
    ) -> bytes:
        """Send ``data`` on a fresh connection. ``then``: ``read`` the answer until it is
        complete, the server closes or ``wait`` passes; ``eof`` half-close first; ``close``
        leave at once. ``head_only``: the answer has no body (to a HEAD)."""
        host, port = self.url.removeprefix("http://").rsplit(":", 1)
        stream = await trio.open_tcp_stream(host, int(port))
        out = b""
        try:
            await stream.send_all(data)
            if then == "close":
                return b""
            if then == "eof":
                await stream.send_eof()
            with trio.move_on_after(wait):
                while chunk := await stream.receive_some(65536):
                    out += chunk
                    if _complete_response(out) or (head_only and b"\r\n\r\n" in out):
                        break
        finally:
            await stream.aclose()
        return out

    async def requests_total(self) -> int:
        """Every request to a door the gateway accounted for: the sum over ``/metrics``'s
        ``by_surface`` (``requests`` leaves ``count_tokens`` out)."""
        response = await self.http.get(f"{self.url}/metrics", headers=self.auth)
        response.raise_for_status()
        surfaces = response.json()["by_surface"].values()
        return sum(int(surface["requests"]["total"]) for surface in surfaces)


def _complete_response(data: bytes) -> bool:
    """Whether ``data`` holds a whole HTTP/1.1 response (Content-Length or chunked)."""
    head, sep, body = data.partition(b"\r\n\r\n")
    if not sep:
        return False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            return len(body) >= int(value)
        if name == b"transfer-encoding" and b"chunked" in value.lower():
            return body.endswith(b"0\r\n\r\n")
    return False


@dataclass
class RawAnswer:
    status: int | None
    headers: dict[bytes, bytes]
    body: bytes


def parse_raw(data: bytes) -> RawAnswer:
    """The first response in ``data`` (its chunked body decoded), or status None."""
    if not data:
        return RawAnswer(None, {}, b"")
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip()
    if b"content-length" in headers:
        return RawAnswer(status, headers, rest[: int(headers[b"content-length"])])
    body = b""
    while b"chunked" in headers.get(b"transfer-encoding", b"") and rest:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        body, rest = body + rest[:size], rest[size + 2 :]
    return RawAnswer(status, headers, body)


def exchange_from_raw(
    method: str, path: str, answer: RawAnswer, upstream: list[dict[str, Any]]
) -> Exchange:
    assert answer.status is not None
    headers = httpx2.Headers(
        [(k.decode("latin-1"), v.decode("latin-1")) for k, v in answer.headers.items()]
    )
    return Exchange(method, path, answer.status, headers, answer.body, upstream)


@asynccontextmanager
async def gateway(config: SimulatorConfig | None = None, **changes: Any) -> AsyncIterator[Gateway]:
    async with (
        proxy_and_simulator(
            config,
            **{
                "metrics_enabled": True,
                "upstream_max_retries": 0,
                "metrics_token": "mt-fuzz",  # the whole view: a client key reads its own only
                **changes,
            },
        ) as (url, sim),
        httpx2.AsyncClient(timeout=EXCHANGE_TIMEOUT) as http,
    ):
        gw = Gateway(url, sim.url, http, auth={"authorization": "Bearer mt-fuzz"})
        await gw.new_upstream_entries()
        yield gw
        await assert_observatory_works(gw, gw.auth)


async def assert_observatory_works(gw: Gateway, headers: dict[str, str]) -> None:
    """After the fuzzing, the metrics still export (a bad string that became a label would
    break every later scrape)."""
    for path in ("/metrics", "/metrics/prometheus", "/health"):
        response = await gw.http.get(f"{gw.url}{path}", headers=headers)
        assert response.status_code == 200, (path, response.status_code, response.text[:300])


# -- shapes ------------------------------------------------------------------------------


def assert_openai_error(body: bytes, context: object = "") -> dict[str, Any]:
    """``{"error": {"message", "type", "param", "code"}}``, all four keys, nothing else."""
    parsed = json.loads(body)
    assert isinstance(parsed, dict) and set(parsed) == {"error"}, context
    error = parsed["error"]
    assert isinstance(error, dict), context
    assert set(error) == {"message", "type", "param", "code"}, context
    assert isinstance(error["message"], str) and error["message"], context
    assert isinstance(error["type"], str) and error["type"], context
    assert error["param"] is None or isinstance(error["param"], str), context
    assert error["code"] is None or isinstance(error["code"], str), context
    return error


def assert_anthropic_error(body: bytes, context: object = "") -> dict[str, Any]:
    """``{"type": "error", "error": {"type", "message"}}`` (the upstream's own may add a
    ``request_id``, as the real API does)."""
    parsed = json.loads(body)
    assert isinstance(parsed, dict) and parsed.get("type") == "error", context
    assert set(parsed) <= {"type", "error", "request_id"}, context
    error = parsed["error"]
    assert isinstance(error, dict), context
    assert isinstance(error.get("type"), str) and error["type"], context
    assert isinstance(error.get("message"), str), context
    return error


def assert_error_shape(anthropic: bool, body: bytes, context: object = "") -> dict[str, Any]:
    if anthropic:
        return assert_anthropic_error(body, context)
    return assert_openai_error(body, context)


def _tally(ex: Exchange, refused: bool | None) -> None:
    """With ``FUZZ_TALLY=<file>``, one line per example (door, status, upstream statuses,
    oracle), to see what the strategies reach: ``sort <file> | uniq -c``."""
    target = os.environ.get("FUZZ_TALLY")
    if target:
        upstream = ",".join(str(c["status"]) for c in ex.calls) or "-"
        with open(target, "a") as out:
            out.write(f"{ex.path} {ex.status} upstream={upstream} oracle={refused}\n")


def model_not_served(ex: Exchange) -> bool:
    """The OpenAI door passed on the upstream's 404 for a model it does not serve."""
    return ex.status == 404 and ex.json()["error"]["code"] == "model_not_found"


# Statuses of the gateway's own making after which Anthropic clients must not retry.
_FINAL: Final = frozenset({400, 401, 403, 404, 405, 413, 415, 422, 431})


def check_answer(
    ex: Exchange,
    *,
    refused: bool | None = None,
    stream: bool = False,
    openai_upstream_may_refuse: bool | Callable[[Exchange], bool] = False,
) -> None:
    """The invariants of every POST door.

    Args:
      refused: True when the test's own oracle says the gateway must refuse the body
        itself (4xx, no upstream call); False when it must reach the upstream; None when
        the test does not know.
      stream: the body asked for a stream (the answer, if a success, is SSE).
      openai_upstream_may_refuse: the OpenAI door may pass on an upstream 4xx (for a
        model the upstream does not serve, say), or a predicate of the exchange saying
        so; otherwise an upstream refusal of a body the gateway translated means the
        gateway let an invalid body through.
    """
    anthropic = "/messages" in ex.path  # however the path is spelled
    calls = ex.calls
    _tally(ex, refused)
    assert ex.status < 500, f"a {ex.status}: {ex}"
    assert len(calls) <= 1, f"more than one upstream call (no retry is due): {ex}"
    if refused is True:
        assert not calls, f"an upstream call for a body the gateway must refuse: {ex}"
        assert 400 <= ex.status < 500, f"not refused: {ex}"
    if refused is False:
        assert calls, f"a valid body never reached the upstream: {ex}"
    if not calls:
        assert 400 <= ex.status < 500, f"an answer without an upstream call: {ex}"
        assert ex.headers.get("content-type", "").startswith("application/json"), str(ex)
        error = assert_error_shape(anthropic, ex.body, str(ex))
        if anthropic and ex.status in _FINAL:
            assert ex.headers.get("x-should-retry") == "false", str(ex)
        if not anthropic:
            assert error["type"] != "server_error", str(ex)
        return
    for call in calls:
        if not call["body_truncated"]:  # what reached the upstream is JSON, strictly
            try:
                strict_json(call["body"])
            except ValueError as exc:
                raise AssertionError(f"the upstream was sent no JSON ({exc}): {ex}") from None
    call = calls[0]
    upstream_status = call["status"]
    assert upstream_status is not None and upstream_status < 500, (
        f"the upstream failed (its request was {call['body'][:600]!r}): {ex}"
    )
    if upstream_status >= 400:
        if anthropic:
            # Relayed as it was sent: status, body (with its request_id) and request-id.
            assert ex.status == upstream_status, str(ex)
            assert_anthropic_error(ex.body, str(ex))
            assert ex.json().get("request_id") == call["request_id"], str(ex)
            assert ex.headers.get("request-id") == call["request_id"], str(ex)
        else:
            may_refuse = openai_upstream_may_refuse
            if callable(may_refuse):
                may_refuse = may_refuse(ex)
            assert may_refuse, (
                "the gateway translated the body into one the upstream refused "
                f"(its request was {call['body'][:600]!r}): {ex}"
            )
            assert 400 <= ex.status < 500, str(ex)
            assert_openai_error(ex.body, str(ex))
            assert ex.headers.get("x-request-id") == call["request_id"], str(ex)
        return
    assert ex.status == 200, str(ex)
    if stream:
        assert ex.headers["content-type"].startswith("text/event-stream"), str(ex)
        text = ex.body.decode()
        if anthropic:
            assert "event: message_stop" in text, str(ex)
        else:
            assert text.rstrip().endswith("data: [DONE]"), str(ex)
        return
    reply = ex.json()
    if "count_tokens" in ex.path:
        assert isinstance(reply.get("input_tokens"), int), str(ex)
    elif anthropic:
        assert reply["type"] == "message", str(ex)
    else:
        assert reply["object"] == "chat.completion", str(ex)


# -- JSON, spelled every way a client might ------------------------------------------------


@dataclass(frozen=True)
class Raw:
    """Emitted verbatim: ``NaN``, ``Infinity``, a hand-made escape."""

    text: str


@dataclass(frozen=True)
class Pairs:
    """An object with its members in this order, duplicates included (JSON allows the
    text; Python's parser keeps the last)."""

    items: tuple[tuple[str, Any], ...]


def encode(value: Any, *, ascii_only: bool = True, spaced: bool = False) -> str:
    """``value`` as JSON text. Floats that are not finite come out as ``NaN`` /
    ``Infinity`` / ``-Infinity`` (what Python's json writes, and what it also reads)."""
    comma, colon = (", ", ": ") if spaced else (",", ":")

    def enc(v: Any) -> str:
        if isinstance(v, Raw):
            return v.text
        if isinstance(v, Deep):
            return v.text(enc)
        if isinstance(v, Pairs):
            members = (f"{enc(k)}{colon}{enc(item)}" for k, item in v.items)
            return "{" + comma.join(members) + "}"
        if isinstance(v, dict):
            members = (f"{enc(str(k))}{colon}{enc(item)}" for k, item in v.items())
            return "{" + comma.join(members) + "}"
        if isinstance(v, list | tuple):
            return "[" + comma.join(enc(item) for item in v) + "]"
        return json.dumps(v, ensure_ascii=ascii_only)

    return enc(value)


def to_bytes(text: str) -> bytes:
    """UTF-8, except that a lone surrogate written raw becomes its (invalid) 3-byte form."""
    return text.encode("utf-8", "surrogatepass")


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:20]} is too large for a float")
    return value


def strict_json(text: str | bytes) -> Any:
    """JSON by RFC 8259 as the gateway takes it (docs/compatibility.md): no ``NaN``,
    ``Infinity`` or ``-Infinity``, and no number too large for a float (``1e400``, which
    would go upstream as ``Infinity``): ``ValueError``."""
    return json.loads(text, parse_constant=_not_json, parse_float=_finite)


def parse_like_the_gateway(raw: bytes) -> tuple[bool, Any]:
    """(parses, value) by the gateway's documented rules: UTF-8 (a BOM allowed), JSON
    (``strict_json``), at most 200 levels, no unpaired surrogate."""
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        return False, None
    if not text.strip():
        return False, None
    try:
        value = strict_json(text)
    except (ValueError, RecursionError):
        return False, None
    if depth(value) > 200 or has_lone_surrogate(value):
        return False, None
    return True, value


def anthropic_gateway_refuses(path: str, value: Any) -> bool:
    """What the gateway checks of an Anthropic body (docs/compatibility.md, "what the
    gateway checks"), spelled out independently of the package."""
    if not isinstance(value, dict):
        return True
    model = value.get("model")
    if not isinstance(model, str) or not model.strip():
        return True
    if not isinstance(value.get("messages"), list):
        return True
    if "count_tokens" in path:
        return False
    cap = value.get("max_tokens")
    if not isinstance(cap, int) or isinstance(cap, bool):
        return True
    return "stream" in value and not isinstance(value["stream"], bool)


def openai_gateway_refuses(value: Any) -> bool | None:
    """True for what the OpenAI door must refuse whatever else the body says (not an
    object; ``model`` not a non-empty string; ``messages`` not a non-empty array), else
    None: the rest is the translation's to judge."""
    if not isinstance(value, dict):
        return True
    model, messages = value.get("model"), value.get("messages")
    if not isinstance(model, str) or not model or not isinstance(messages, list) or not messages:
        return True
    return None


def depth(value: Any) -> int:
    """Nesting levels of arrays and objects (iterative: the fuzz nests deep on purpose)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            stack.extend((v, level + 1) for v in item.values())
            deepest = max(deepest, level + 1)
        elif isinstance(item, list):
            stack.extend((v, level + 1) for v in item)
            deepest = max(deepest, level + 1)
    return deepest


def has_lone_surrogate(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


# -- strategies shared by the doors ----------------------------------------------------------

# Text that never spells a simulator directive ("[[sim:...]]" in a prompt would ask it for
# a fault, and the properties say "no 5xx unless asked").
_PLAIN_TEXT = st.text(max_size=12).filter(lambda s: "[[" not in s)
SPECIAL_STRINGS: Final = (
    "",
    " ",
    "\n",
    "\t\r\n ",
    "\x00",
    "\u2028",
    "\ufeff",
    "😀",
    "e\u0301",
    "\U0010ffff",
    "\ud800",  # lone surrogates: written as escapes, or raw (invalid UTF-8 on the wire)
    "a\udfffb",
    "\ude00\ud83d",  # a pair in the wrong order is two lone surrogates
    "null",
    "{}",
    "[[",
    "x" * 70_000,  # huge
)
strings = st.one_of(_PLAIN_TEXT, st.sampled_from(SPECIAL_STRINGS))
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, -1, 1, 2**31, 2**63, 10**30, -(10**30)]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.5, 1.0, -0.0, 1e308, 5e-324]),
    # spelled as written: numbers too large for a double (JSON all the same), and other
    # spellings of numbers than Python's
    st.sampled_from([Raw("1e400"), Raw("-1e999"), Raw("1E+2"), Raw("-0"), Raw("0.0e0")]),
    strings,
)
junk = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(strings, inner, max_size=3)
    ),
    max_leaves=6,
)


@dataclass(frozen=True)
class Deep:
    """``levels`` arrays (or objects) around ``leaf``, written out flat by ``encode``: the
    edits and the encoder never recurse into it."""

    levels: int
    leaf: Any = 0
    kind: str = "list"

    def text(self, enc: Callable[[Any], str]) -> str:
        if self.kind == "list":
            return "[" * self.levels + enc(self.leaf) + "]" * self.levels
        return '{"a":' * self.levels + enc(self.leaf) + "}" * self.levels


deep_junk = st.builds(
    Deep,
    st.sampled_from([20, 150, 199, 200, 201, 260, 2000]),
    st.sampled_from([0, "x", None]),
    st.sampled_from(["list", "dict"]),
)


# Names an added member takes half the time: ones the doors, the translation, the schema
# reshaping and the upstream all read, so that junk lands where code looks.
MEMBER_NAMES: Final = (
    # JSON Schema
    "type", "format", "properties", "items", "anyOf", "oneOf", "allOf", "$ref", "$defs",
    "definitions", "enum", "const", "required", "additionalProperties", "minItems",
    "minimum", "pattern", "description", "title",
    # messages and content
    "role", "content", "name", "text", "source", "media_type", "data", "url", "image_url",
    "detail", "file", "file_data", "filename", "cache_control", "ttl", "citations",
    "tool_calls", "tool_call_id", "function", "arguments", "id", "input", "tool_use_id",
    "is_error", "thinking_blocks", "signature", "refusal", "prompt_cache_breakpoint",
    # top level, both dialects
    "model", "messages", "max_tokens", "stream", "stream_options", "include_usage",
    "system", "tools", "tool_choice", "thinking", "budget_tokens", "output_config",
    "effort", "metadata", "user_id", "stop", "stop_sequences", "temperature", "top_p",
    "top_k", "n", "logprobs", "response_format", "json_schema", "schema", "strict",
    "reasoning_effort", "parallel_tool_calls", "disable_parallel_tool_use", "service_tier",
    "context_management", "mcp_servers", "container",
)  # fmt: skip


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a member of an object or an item of an array (not the root)."""
    out: list[tuple[Any, ...]] = []
    if isinstance(value, dict):
        for key, item in value.items():
            out.append((*prefix, key))
            out.extend(_paths(item, (*prefix, key)))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            out.append((*prefix, i))
            out.extend(_paths(item, (*prefix, i)))
    return out


def _containers(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    if isinstance(value, dict):
        out.append(prefix)
        for key, item in value.items():
            out.extend(_containers(item, (*prefix, key)))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            out.extend(_containers(item, (*prefix, i)))
    return out


def _get(value: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        value = value[step]
    return value


@st.composite
def mutated(draw: st.DrawFn, base: Any, max_mutations: int = 3) -> Any:
    """``base`` (a JSON value made of dicts and lists) after a few random edits: a member
    replaced by junk or by deep nesting, removed, an unknown member added, a member
    duplicated with another value. Returns a value for ``encode``."""
    value = json.loads(json.dumps(base))  # a private copy
    dups: dict[tuple[Any, ...], list[tuple[str, Any]]] = {}
    for _ in range(draw(st.integers(0, max_mutations))):
        kind = draw(st.sampled_from(["replace", "replace", "delete", "add", "deep", "dup"]))
        paths = _paths(value)
        if kind in ("replace", "delete", "deep") and paths:
            path = draw(st.sampled_from(paths))
            parent = _get(value, path[:-1])
            if kind == "delete":
                del parent[path[-1]]
            else:
                parent[path[-1]] = draw(deep_junk if kind == "deep" else junk)
        elif kind in ("add", "dup"):
            holders = _containers(value)
            if not holders:
                continue
            path = draw(st.sampled_from(holders))
            holder = _get(value, path)
            if kind == "add":
                holder[draw(st.one_of(strings, st.sampled_from(MEMBER_NAMES)))] = draw(junk)
            elif holder:
                key = draw(st.sampled_from(sorted(holder)))
                dups.setdefault(path, []).append((key, draw(junk)))
    return _with_duplicates(value, dups, ())


def _with_duplicates(
    value: Any, dups: dict[tuple[Any, ...], list[tuple[str, Any]]], path: tuple[Any, ...]
) -> Any:
    if isinstance(value, dict):
        items = tuple((k, _with_duplicates(v, dups, (*path, k))) for k, v in value.items())
        extra = dups.get(path)
        if not extra:
            return dict(items)
        # The duplicate comes first, so the parsed value (last wins) is still the real one's
        # unless a later edit replaced it.
        return Pairs(tuple(extra) + items)
    if isinstance(value, list):
        return [_with_duplicates(v, dups, (*path, i)) for i, v in enumerate(value)]
    return value


@st.composite
def spelled(draw: st.DrawFn, value: Any) -> bytes:
    """``value`` as the bytes of a request body, spelled in one of the ways JSON can be:
    ASCII escapes or raw UTF-8, spaced or compact, with a BOM or surrounding whitespace."""
    text = encode(value, ascii_only=draw(st.booleans()), spaced=draw(st.booleans()))
    prefix = draw(st.sampled_from(["", "", "", " \n", "\ufeff"]))
    suffix = draw(st.sampled_from(["", "", "\n", " \t\r\n"]))
    return to_bytes(prefix + text + suffix)


# -- headers -------------------------------------------------------------------------------

CONTENT_TYPES: Final = (
    b"application/json",
    b"application/json; charset=utf-8",
    b"APPLICATION/JSON",
    b"application/json; charset=latin-1",
    b"application/json; charset=utf-16",
    b"text/plain",
    b"application/x-www-form-urlencoded",
    b"multipart/form-data; boundary=xyz",
    b"application/octet-stream",
    b"*/*",
    b"garbage",
    b"\xff\xfe",
    b"",
)
# (value, refused with 415): the gateway takes identity only.
CONTENT_ENCODINGS: Final = (
    (b"identity", False),
    (b"IDENTITY", False),
    (b"", False),
    (b"gzip", True),
    (b"br", True),
    (b"deflate, identity", True),
    (b"x-\xe9", True),
)
WEIRD_VALUES: Final = (
    b"",
    b"\xff",
    b"\xc3\xa9t\xc3\xa9",
    b"a\x01b",
    b"x" * 4000,
    b"Bearer",
    b"Bearer  \t k",
    b"bearer k",
    b"Basic dXNlcjpwYXNz",
    b"null",
    b",,,",
    b"2023-06-01",
    b"2023-06-01, 2026-10-21",
    b"1999-01-01",
    b"\xe2\x80\xae",
)
_HEADER_NAMES: Final = (
    b"authorization",
    b"x-api-key",
    b"api-key",
    b"anthropic-version",
    b"anthropic-beta",
    b"accept",
    b"accept-encoding",
    b"user-agent",
    b"x-stainless-retry-count",
    b"x-request-id",
    b"connection",
    b"expect",
    b"cookie",
    b"x-odd_name~!",
)
_BETAS: Final = (
    b"prompt-caching-2024-07-31",
    b"interleaved-thinking-2025-05-14",
    b"context-management-2025-06-27",
    b"claude-code-20250219",
    b"not-a-beta",
    b"a,,b, ,c",
    b"\xff",
)
header_value = st.one_of(
    st.sampled_from(WEIRD_VALUES),
    st.sampled_from(_BETAS),
    st.binary(max_size=20).map(lambda b: bytes(c for c in b if c >= 0x20 and c != 0x7F)),
).map(lambda value: value.strip(b" \t"))  # HTTP strips the ends; h11 refuses to send them


@dataclass(frozen=True)
class HeaderCase:
    headers: tuple[tuple[bytes, bytes], ...]
    encoding_refused: bool  # a Content-Encoding the gateway refuses (415)


@st.composite
def header_cases(draw: st.DrawFn) -> HeaderCase:
    """Odd but well-framed headers: no CR/LF/NUL (the HTTP layer's to refuse), no Origin
    (a browser's, with rules of its own), no Content-Length or Transfer-Encoding (framing,
    tested with raw sockets)."""
    headers: list[tuple[bytes, bytes]] = []
    refused = False
    if draw(st.booleans()):
        headers.append((b"content-type", draw(st.sampled_from(CONTENT_TYPES))))
    for _ in range(draw(st.integers(0, 2))):
        if draw(st.integers(0, 3)) == 0:
            value, refuses = draw(st.sampled_from(CONTENT_ENCODINGS))
            headers.append((b"content-encoding", value))
            refused = refused or refuses
    for _ in range(draw(st.integers(0, 5))):
        headers.append((draw(st.sampled_from(_HEADER_NAMES)), draw(header_value)))
    return HeaderCase(tuple(headers), refused)
