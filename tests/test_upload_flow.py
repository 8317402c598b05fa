"""``UploadFlow``: an upload's body is received no faster than the handler takes it."""

from __future__ import annotations

from typing import Any

import trio

from trio_batcher.edge.upload_flow import SCOPE_KEY, WINDOW_BYTES, GatedBody, UploadFlow

CHUNK = 64 * 1024


async def test_receive_waits_while_a_window_is_untaken_and_resumes_as_it_is_taken(
    autojump_clock: trio.abc.Clock,
) -> None:
    served = 0

    async def server_receive() -> dict[str, Any]:
        nonlocal served
        served += 1
        return {"type": "http.request", "body": b"x" * CHUNK, "more_body": True}

    seen: dict[str, Any] = {}

    async def inner(scope: Any, receive: Any, send: Any) -> None:
        body = GatedBody(scope[SCOPE_KEY], None, None)
        for _ in range(WINDOW_BYTES // CHUNK):
            body.append((await receive())["body"])
        with trio.move_on_after(10):  # a window in, none taken: the next receive waits
            await receive()
            seen["early"] = True
        seen["held_at"] = served
        assert len(await body.__anext__()) == WINDOW_BYTES  # the handler takes it all
        body.append((await receive())["body"])  # and receiving resumes at once
        seen["after"] = served

    flow = UploadFlow(inner, "/v1/files")
    await flow({"type": "http", "method": "POST", "path": "/v1/files"}, server_receive, None)
    assert "early" not in seen
    assert seen["held_at"] == WINDOW_BYTES // CHUNK
    assert seen["after"] == seen["held_at"] + 1


async def test_other_routes_pass_through_ungated() -> None:
    calls = []

    async def inner(scope: Any, receive: Any, send: Any) -> None:
        calls.append(SCOPE_KEY in scope)

    flow = UploadFlow(inner, "/v1/files")
    for method, path in (("GET", "/v1/files"), ("POST", "/v1/chat/completions")):
        await flow({"type": "http", "method": method, "path": path}, None, None)
    await flow({"type": "lifespan"}, None, None)
    assert calls == [False, False, False]
