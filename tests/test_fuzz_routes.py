"""Fuzzing the Quart routes -- models, health, metrics, the dashboard and the files under
``/visuals/`` -- and every path's wrong methods, over raw sockets (request targets exactly
as written: percent-escapes, dot segments, absolute form).

Whatever the method, target, query and headers: never a 5xx, and every error is JSON in
the client's dialect -- Anthropic's when the request sends ``anthropic-version`` or is for
``/v1/messages``, OpenAI's otherwise (docs/compatibility.md). Model lists and model objects
come in the dialect's shape too.
"""

from __future__ import annotations

import gc
import json
import warnings
from dataclasses import dataclass
from typing import Final
from urllib.parse import quote

import pytest
from fuzz_support import (
    Compact,
    assert_error_shape,
    explore,
    gateway,
    parse_raw,
    strings,
)
from hypothesis import strategies as st

MODEL_IDS: Final = (
    "claude-sonnet-4-5",
    "claude-sonnet-4-5-20250929",
    "default",
    "gpt-4o",
    "",
    "..",
    "a/b",
)
PATHS: Final = (
    "/v1/models",
    "/models",
    "/v1/models/",
    "/v1/models/{id}",
    "/models/{id}",
    "//v1/models/{id}",
    "/health",
    "/metrics",
    "/metrics/prometheus",
    "/dashboard",
    "/visuals/",
    "/visuals/{file}",
    "/v1/chat/completions",
    "/v1/messages",
    "/v1/messages/count_tokens",
    "/v1/responses",
    "/v1/responses/{id}",
    "/v1/responses/{id}/input_items",
    "/v1/embeddings",
    "/v1/files",
    "/",
    "/v2/{id}",
)
FILES: Final = (
    "results.html",
    "assets/style.css",
    "build_data.py",
    "../README.md",
    "%2e%2e/%2e%2e/README.md",
    "..%5c..%5cREADME.md",
    "%00",
    "x" * 300,
)
QUERY_KEYS: Final = (
    "limit",
    "after_id",
    "before_id",
    "beta",
    "x",
    "after",
    "before",
    "order",
    "include",
    "stream",
)
QUERY_VALUES: Final = (
    "1",
    "0",
    "-1",
    "1000",
    "1001",
    "1e3",
    "abc",
    "",
    "%00",
    "%ff",
    "99999999999999999999999",
    "claude-sonnet-4-5",
)
ACCEPTS: Final = (
    "application/openmetrics-text; version=1.0.0",
    "application/openmetrics-text; version=99",
    "text/plain;version=0.0.4",
    "*/*",
    "garbage",
    "",
)


@dataclass(frozen=True, repr=False)
class Case(Compact):
    method: str
    target: str
    headers: tuple[tuple[str, str], ...]

    @property
    def anthropic(self) -> bool:
        """The dialect of the answer: a POST door's own (the chat door speaks OpenAI to
        everyone), else Anthropic's for a client that sends ``anthropic-version``."""
        path = self.target.split("?")[0]
        if "/messages" in path:
            return True
        if self.method == "POST" and ("/chat/completions" in path or path.endswith("/responses")):
            return False
        return any(name == "anthropic-version" for name, _ in self.headers)


def _escaped(text: str) -> str:
    return quote(text.encode("utf-8", "surrogatepass"), safe="")


@st.composite
def cases(draw: st.DrawFn) -> Case:
    method = draw(st.sampled_from(["GET"] * 6 + ["HEAD", "POST", "PUT", "DELETE", "OPTIONS"]))
    path = draw(st.sampled_from(PATHS))
    # (not the 70,000-character one: past 64 KiB of head, h11 answers 431 itself)
    ids = strings.filter(lambda text: len(text) < 5000).map(_escaped)
    model_id = draw(st.one_of(st.sampled_from(MODEL_IDS), ids))
    path = path.replace("{id}", model_id).replace("{file}", draw(st.sampled_from(FILES)))
    if draw(st.integers(0, 5)) == 0:  # absolute form, which HTTP/1.1 servers must take
        path = draw(st.sampled_from(["http://gateway", "http://[::1]:8000", "x:"])) + path
    pairs = draw(
        st.lists(st.tuples(st.sampled_from(QUERY_KEYS), st.sampled_from(QUERY_VALUES)), max_size=3)
    )
    if pairs:
        path += "?" + "&".join(f"{k}={v}" for k, v in pairs)
    headers: list[tuple[str, str]] = []
    if draw(st.booleans()):
        headers.append(("anthropic-version", draw(st.sampled_from(["2023-06-01", "x", ""]))))
    if draw(st.booleans()):
        headers.append(("accept", draw(st.sampled_from(ACCEPTS))))
    if draw(st.integers(0, 3)) == 0:
        headers.append(("authorization", draw(st.sampled_from(["Bearer x", "Basic y", "x"]))))
    return Case(method, path, tuple(headers))


def _request(case: Case) -> bytes:
    lines = [f"{case.method} {case.target} HTTP/1.1", "host: 127.0.0.1"]
    lines += [f"{name}: {value}" for name, value in case.headers]
    if case.method in ("POST", "PUT"):
        lines.append("content-length: 0")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def test_every_route_answers_in_the_clients_dialect_and_never_fails() -> None:
    async with gateway() as gw:

        async def check(case: Case) -> None:
            raw = await gw.raw(_request(case), head_only=case.method == "HEAD")
            answer = parse_raw(raw)
            context = (case, answer.status, answer.body[:300])
            assert answer.status is not None, context
            assert answer.status < 500, context
            if case.method == "HEAD" or (case.method == "OPTIONS" and answer.status < 400):
                return
            content_type = answer.headers.get(b"content-type", b"")
            if answer.status >= 400:
                assert content_type.startswith(b"application/json"), context
                assert_error_shape(case.anthropic, answer.body, context)
                return
            if not content_type.startswith(b"application/json"):
                return  # a page, a file, the Prometheus text
            body = json.loads(answer.body)
            path = case.target.split("?")[0]
            if path.endswith("/models") and case.method == "GET":
                if any(name == "anthropic-version" for name, _ in case.headers):
                    assert isinstance(body["data"], list) and "has_more" in body, context
                else:
                    assert body["object"] == "list", context

        await explore(cases(), check, max_examples=200)


@pytest.mark.parametrize("target", ["http://[/v1/models", "http://[::1/v1/chat/completions"])
async def test_an_unparsable_absolute_target_is_a_4xx(target: str) -> None:
    async with gateway() as gw:
        answer = parse_raw(await gw.raw(f"GET {target} HTTP/1.1\r\nhost: x\r\n\r\n".encode()))
    assert answer.status is not None and 400 <= answer.status < 500, answer
    assert_error_shape(False, answer.body)


async def test_a_refused_web_origin_is_anthropic_shaped_for_anthropic_clients() -> None:
    async with gateway() as gw:
        response = await gw.http.get(
            f"{gw.url}/v1/models",
            headers={"anthropic-version": "2023-06-01", "origin": "https://evil.example"},
        )
    assert response.status_code == 403
    assert_error_shape(True, response.content)


@pytest.mark.parametrize("target", ["/visuals/", "/visuals/results.html", "/dashboard"])
async def test_a_head_request_for_a_page_leaves_no_file_open(target: str) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        async with gateway() as gw:
            request = f"HEAD {target} HTTP/1.1\r\nhost: x\r\n\r\n".encode()
            answer = parse_raw(await gw.raw(request, head_only=True))
        gc.collect()  # the servers have stopped: whatever the HEAD left is garbage now
    assert answer.status == 200
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)]
