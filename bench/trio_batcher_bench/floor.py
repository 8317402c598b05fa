"""The serving stack's floor: the least a proxy on hypercorn and httpcore2 can cost.

An ASGI app under hypercorn's trio worker that forwards a ``POST /v1/messages`` body to the
upstream through the proxy's own ``UpstreamPool`` and sends the reply back, byte for byte:
no translation, no admission, no metrics, no disconnect watch. The ``overhead`` scenario
drives it with the direct load, so its CPU per request is what the required stack (trio,
hypercorn, h11, httpcore2) costs on this machine before the proxy does anything -- the
line under which no amount of work on trio-batcher's own code can bring the proxy.

    python -m trio_batcher_bench.floor --port 8010 --upstream http://127.0.0.1:8011
"""

from __future__ import annotations

import argparse
import contextlib
from functools import partial
from typing import Any

import trio

from trio_batcher.serving import serve_app, tune_gc_for_serving
from trio_batcher.upstream.pool import UpstreamPool

_PASS_HEADERS = (b"content-type", b"x-api-key", b"anthropic-version")


def floor_app(upstream: str) -> Any:
    pool = UpstreamPool(upstream, connect_timeout=10.0)
    url = pool.url("/v1/messages")

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await pool.aclose()
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["method"] == "GET":  # readiness
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body", False):
                break
        headers = [(k, v) for k, v in scope["headers"] if k in _PASS_HEADERS]
        response = await pool.request(b"POST", url, headers, body)
        try:
            reply = await response.read(1 << 30)
        finally:
            await response.aclose()
        await send(
            {
                "type": "http.response.start",
                "status": response.status_code,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", b"%d" % len(reply)),
                ],
            }
        )
        await send({"type": "http.response.body", "body": reply})

    return app


async def _main(port: int, upstream: str) -> None:
    async with trio.open_nursery() as nursery:
        await nursery.start(partial(serve_app, floor_app(upstream), "127.0.0.1", port))
        tune_gc_for_serving()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m trio_batcher_bench.floor")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True)
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        trio.run(_main, args.port, args.upstream)


if __name__ == "__main__":
    main()
