"""Reading and parsing a request body: size, encoding, UTF-8, nesting, surrogates.

Every door takes its JSON the same way, so every door refuses the same malformed input
with the same 4xx before anything else runs.
"""

from __future__ import annotations

import io
from typing import Final, final

import trio

from ..errors import ProxyError
from ..json_text import MAX_JSON_DEPTH, deeper_than, lone_surrogate, strict_loads
from .http import Message, Receive, Scope

__all__ = [
    "LARGE_BODY_BYTES",
    "MAX_JSON_DEPTH",
    "MIN_BYTES_PER_WINDOW",
    "PacedReceive",
    "body_too_large",
    "body_too_slow",
    "parse_json_body",
    "read_body",
]

# A body this large is parsed and translated in a worker thread (a normal request is a few
# KB and takes well under a millisecond; a 30 MB one with a million messages takes seconds).
LARGE_BODY_BYTES: Final = 256 * 1024


def body_too_large(max_body_bytes: int) -> ProxyError:
    return ProxyError(
        413,
        f"The request body is larger than MAX_BODY_BYTES ({max_body_bytes} bytes).",
        code="request_entity_too_large",
    )


# What a body must bring in each BODY_READ_TIMEOUT_S of waiting for it (or its end).
MIN_BYTES_PER_WINDOW: Final = 64 * 1024


def body_too_slow(window_s: float) -> ProxyError:
    return ProxyError(
        408,
        f"The request body arrived too slowly: less than {MIN_BYTES_PER_WINDOW // 1024} KiB "
        f"in {window_s:g} s (BODY_READ_TIMEOUT_S).",
        code="request_timeout",
        headers={"Connection": "close"},
    )


@final
class PacedReceive:
    """``receive`` for a request whose body must keep coming; raises ``body_too_slow``.

    The rule: while the body is incomplete, each ``window_s`` spent waiting for it must
    bring at least ``MIN_BYTES_PER_WINDOW`` bytes, or the rest of the body. A client that
    trickles (one byte a second holds a connection, a descriptor and a buffer for nothing)
    is cut after ``window_s``, while a large upload on a slow link (2 KiB/s passes at the
    default 30 s) goes on as long as it needs: a minimum rate, not a total deadline. Only
    time spent waiting on the client counts, so a reader that pauses (the Files upload
    waits for the disk, ``upload_flow``) is not charged for it. Once the body is complete
    this is ``receive`` itself: waiting for ``http.disconnect`` during a long stream is not
    a slow body.
    """

    def __init__(self, receive: Receive, window_s: float) -> None:
        self._receive = receive
        self.window_s = window_s
        self._waited = 0.0
        self._unmarked = 0  # bytes since the window last restarted
        self._done = False

    async def __call__(self) -> Message:
        if self._done:
            return await self._receive()
        started = trio.current_time()
        with trio.move_on_after(max(0.0, self.window_s - self._waited)) as waiting:
            message = await self._receive()
        if waiting.cancelled_caught:
            raise body_too_slow(self.window_s)
        self._waited += trio.current_time() - started
        if message["type"] != "http.request" or not message.get("more_body", False):
            self._done = True
            return message
        self._unmarked += len(message.get("body", b""))
        if self._unmarked >= MIN_BYTES_PER_WINDOW:
            self._unmarked, self._waited = 0, 0.0
        return message


def parse_json_body(raw: bytes) -> object:
    """The request's JSON, or a 400 that says what is wrong with it.

    Stricter than ``json.loads(bytes)`` where that would let trouble in: the body must be
    UTF-8 (JSON's only interchange encoding; ``json.loads`` would also take UTF-16 and
    encoded surrogates), may not use ``NaN``/``Infinity``, may not spell an unpaired UTF-16
    surrogate as an escape, and may not nest deeper than ``MAX_JSON_DEPTH``
    (``json_text``). Each of those would otherwise fail later, far
    from the input: in the upstream call's serialisation, or in every metrics export once
    a bad string is a model label.
    """
    if not raw or raw.isspace():  # (not strip(): a copy of the whole body)
        raise ProxyError(400, "The request body is empty; send a JSON object.", code="invalid_json")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ProxyError(
            400, f"The request body is not UTF-8 text ({exc.reason}).", code="invalid_json"
        ) from None
    try:
        payload = strict_loads(text)
    except ValueError as exc:
        raise ProxyError(
            400, f"We could not parse the JSON body of your request ({exc}).", code="invalid_json"
        ) from None
    except RecursionError:
        raise _too_deep() from None
    if deeper_than(text, MAX_JSON_DEPTH):
        raise _too_deep()
    if "\\ud" in text or "\\uD" in text:
        where = lone_surrogate(payload)
        if where is not None:
            raise ProxyError(
                400,
                "The request contains an unpaired UTF-16 surrogate escape (\\ud800-\\udfff), "
                "which is not valid Unicode text.",
                param=where.encode("utf-8", "backslashreplace").decode("utf-8") or None,
                code="invalid_json",
            )
    return payload


def _too_deep() -> ProxyError:
    return ProxyError(
        400,
        f"The JSON body of your request is nested too deeply (more than {MAX_JSON_DEPTH} levels).",
        code="invalid_json",
    )


async def read_body(scope: Scope, receive: Receive, limit: int) -> bytes | None:
    """The whole body, or None if the client left while sending it; 413 past ``limit``,
    415 for a compressed one."""
    for name, value in scope["headers"]:
        if name == b"content-encoding" and value.strip().lower() not in (b"", b"identity"):
            raise ProxyError(
                415,
                f"Content-Encoding {value.decode('latin-1')!a} is not supported for "
                "request bodies; send the JSON uncompressed.",
                type="invalid_request_error",
                code="unsupported_content_encoding",
                headers={"Accept-Encoding": "identity"},
            )
        if name == b"content-length":
            try:
                declared = int(value)
            except ValueError:
                raise ProxyError(
                    400, "The Content-Length header is not a number.", code="bad_request"
                ) from None
            if declared > limit:
                raise body_too_large(limit)
    # Gathered in a BytesIO rather than a list of chunks joined at the end: the join held
    # the body twice at once (chunks and result), and ten large bodies that arrive
    # together finish together. A BytesIO grows by realloc (for a large buffer, remapped
    # pages, not copied) and hands over its buffer as the bytes without a copy.
    gathered = io.BytesIO()
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        if gathered.tell() + len(chunk) > limit:
            raise body_too_large(limit)
        if not message.get("more_body", False):
            if not gathered.tell():
                return bytes(chunk)  # the whole body in one message (bytes: not copied)
            gathered.write(chunk)
            return gathered.getvalue()
        gathered.write(chunk)
