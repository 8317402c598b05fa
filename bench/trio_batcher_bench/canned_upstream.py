"""A canned Messages upstream that costs almost nothing: the ``peers`` scenario's upstream.

The simulator checks every request the way the real API does and builds each reply, which
costs it about 2 ms of CPU per request here; on a 2-core machine that is a core the
gateways under test then compete with, and at 50 clients the simulator, not the gateway,
sets the direct phase's pace. Comparing gateways wants an upstream that stays out of the
way, as the performance issue's reference figures had (a stdlib server): this one answers
every ``POST /v1/messages`` after ``--ttft-ms`` with the same message, or, when the body
asks to stream, with the same events, one delta every ``1 / --tokens-per-s`` seconds.
Nothing is validated; keep-alive is honoured (a stream is sent chunked); each reply carries
a ``request-id``.

It is not an HTTP server anyone should use: it reads a request head and a ``Content-Length``
body and answers; that is all a gateway under test sends it. It runs in the bench only,
never on the proxy's path.

    python -m trio_batcher_bench.canned_upstream --port 8020 --ttft-ms 50 --tokens-per-s 100
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
from typing import Final

import trio

__all__ = ["main", "message_body", "stream_events"]

MODEL: Final = "claude-sonnet-4-5"
_MAX_HEAD: Final = 64 * 1024
_WORD: Final = " token"
_ids = itertools.count(1)


def message_body(tokens: int, request_id: int) -> bytes:
    """A whole Messages reply of ``tokens`` output tokens."""
    return json.dumps(
        {
            "id": f"msg_canned{request_id:012d}",
            "type": "message",
            "role": "assistant",
            "model": MODEL,
            "content": [{"type": "text", "text": "Canned reply:" + _WORD * tokens}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 12, "output_tokens": tokens},
        },
        separators=(",", ":"),
    ).encode()


def _event(name: str, data: dict[str, object]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def stream_events(tokens: int, request_id: int) -> tuple[bytes, bytes, bytes]:
    """The stream's prelude (up to the first block's start), one delta, and its end."""
    start: dict[str, object] = {
        "id": f"msg_canned{request_id:012d}",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 12, "output_tokens": 1},
    }
    prelude = _event("message_start", {"type": "message_start", "message": start})
    prelude += _event(
        "content_block_start",
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    )
    delta = _event(
        "content_block_delta",
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": _WORD}},
    )
    end = _event("content_block_stop", {"type": "content_block_stop", "index": 0})
    end += _event(
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn", "stop_sequence": None},
            "usage": {"output_tokens": tokens},
        },
    )
    end += _event("message_stop", {"type": "message_stop"})
    return prelude, delta, end


def _head(content_type: bytes, request_id: int, length: int | None) -> bytes:
    """A 200's head: framed by ``length``, or chunked (a stream) when it is None."""
    lines = [
        b"HTTP/1.1 200 OK",
        b"content-type: " + content_type,
        b"request-id: req_canned%012d" % request_id,
        b"content-length: %d" % length if length is not None else b"transfer-encoding: chunked",
    ]
    return b"\r\n".join(lines) + b"\r\n\r\n"


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


async def _serve_one(stream: trio.SocketStream, ttft_s: float, rate: float, tokens: int) -> None:
    buffer = b""
    async with stream:
        while True:
            while b"\r\n\r\n" not in buffer:
                if len(buffer) > _MAX_HEAD:
                    return
                chunk = await stream.receive_some(65536)
                if not chunk:
                    return
                buffer += chunk
            head, _, buffer = buffer.partition(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value.strip())
            while len(buffer) < length:
                chunk = await stream.receive_some(65536)
                if not chunk:
                    return
                buffer += chunk
            body, buffer = buffer[:length], buffer[length:]
            request_id = next(_ids)
            await trio.sleep(ttft_s)
            if b'"stream":true' in body.replace(b" ", b""):
                await _stream(stream, request_id, rate, tokens)
                continue
            reply = message_body(tokens, request_id)
            await stream.send_all(_head(b"application/json", request_id, len(reply)) + reply)


async def _stream(stream: trio.SocketStream, request_id: int, rate: float, tokens: int) -> None:
    prelude, delta, end = stream_events(tokens, request_id)
    await stream.send_all(_head(b"text/event-stream", request_id, None) + _chunk(prelude))
    for i in range(tokens):
        if i and rate > 0:
            await trio.sleep(1 / rate)
        last = i == tokens - 1
        await stream.send_all(_chunk(delta + end) + b"0\r\n\r\n" if last else _chunk(delta))


async def _handle(stream: trio.SocketStream, ttft_s: float, rate: float, tokens: int) -> None:
    # A client that left, or a head we cannot read: nothing to answer.
    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError, ValueError):
        await _serve_one(stream, ttft_s, rate, tokens)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="A canned Messages upstream for benchmarks.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--ttft-ms", type=float, default=50.0)
    parser.add_argument("--tokens-per-s", type=float, default=0.0)
    parser.add_argument("--tokens", type=int, default=48)
    args = parser.parse_args(argv)

    async def serve() -> None:
        handler = _Handler(args.ttft_ms / 1000, args.tokens_per_s, args.tokens)
        await trio.serve_tcp(handler, args.port, host=args.host, backlog=4096)

    trio.run(serve)


class _Handler:
    def __init__(self, ttft_s: float, rate: float, tokens: int) -> None:
        self._args = (ttft_s, rate, tokens)

    async def __call__(self, stream: trio.SocketStream) -> None:
        await _handle(stream, *self._args)


if __name__ == "__main__":
    main()
