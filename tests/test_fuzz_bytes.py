"""Fuzzing every POST door with bytes that are not a request body, and with keys.

Non-JSON, truncated JSON, invalid UTF-8, byte-order marks, other encodings, JSON scalars
and arrays, forms and multipart bodies -- at each door, under each spelling of its path.
The gateway must refuse each of them itself (a 4xx in the door's dialect, no upstream
call), except what is still a JSON object once a UTF-8 BOM and surrounding whitespace are
allowed (docs/compatibility.md), which is then judged as any body is.

With ``PROXY_API_KEYS`` set, the key headers (``Authorization: Bearer``, ``api-key``,
``x-api-key``, repeated, odd) decide before the body is read: a wrong or missing key is a
401 in the door's dialect with no upstream call, whatever the body.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Final

from fuzz_support import (
    CHAT,
    COUNT_TOKENS,
    MESSAGES,
    Compact,
    anthropic_gateway_refuses,
    check_answer,
    explore,
    gateway,
    model_not_served,
    openai_gateway_refuses,
    parse_like_the_gateway,
)
from hypothesis import strategies as st

VALID: Final = {
    CHAT: {"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "Hello"}]},
    MESSAGES: {
        "model": "claude-sonnet-4-5",
        "max_tokens": 20,
        "messages": [{"role": "user", "content": "Hello"}],
    },
    COUNT_TOKENS: {"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "Hi"}]},
}
# Each door under the spellings that reach it (docs: base URLs are forgiving).
SPELLINGS: Final = {
    CHAT: ("/v1/chat/completions", "/chat/completions", "//v1/chat/completions/"),
    MESSAGES: ("/v1/messages", "/v1/v1/messages", "/messages?beta=true"),
    COUNT_TOKENS: ("/v1/messages/count_tokens", "/v1/v1/messages/count_tokens?beta=true"),
}
NOT_BODIES: Final = (
    b"",
    b" \r\n\t ",
    b"null",
    b"true",
    b"0",
    b"-1e999",
    b'"a string"',
    b"[]",
    b'[{"model": "claude-sonnet-4-5"}]',
    b"{}",
    b"{",
    b"}",
    b'{"model": "claude-sonnet-4-5",}',
    b"{'model': 'claude-sonnet-4-5'}",
    b"{model: 1}",
    b'{"a": 1} trailing',
    b"{}{}",
    b'{"a": 1 /* comment */}',
    b'{"a": "\x00"}',
    b"\x00\x00\x00",
    b"\xef\xbb\xbf",
    b"\xef\xbb\xbf\xef\xbb\xbf{}",
    b"\xfe\xff\x00{\x00}",
    b"\xff\xfe{\x00}\x00",
    b'{"a": "\xff"}',
    b'{"a": "\xc0\xaf"}',
    b'{"a": "\xed\xa0\x80"}',
    b'{"a": "\xf4\x90\x80\x80"}',
    b'{"a": "\\ud800"}',
    b'{"a": "\\x41"}',
    b'{"a": "\\u12"}',
    b"model=claude-sonnet-4-5&messages=hi",
    b'--xyz\r\nContent-Disposition: form-data; name="file"; filename="a.json"\r\n'
    b"Content-Type: application/json\r\n\r\n{}\r\n--xyz--\r\n",
    b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03\xab\xae\x05\x00C\xbf\xa6\xa3\x02\x00\x00\x00",
    b"[" * 300 + b"]" * 300,
    b"{" * 5000,
)


def _utf16(door: str) -> bytes:
    return json.dumps(VALID[door]).encode("utf-16")


@st.composite
def bodies(draw: st.DrawFn, door: str) -> bytes:
    valid = json.dumps(VALID[door]).encode()
    kind = draw(st.sampled_from(["listed", "truncated", "flipped", "inserted", "binary", "enc"]))
    if kind == "listed":
        return draw(st.sampled_from(NOT_BODIES))
    if kind == "truncated":
        return valid[: draw(st.integers(0, len(valid) - 1))]
    if kind == "flipped":
        at = draw(st.integers(0, len(valid) - 1))
        return valid[:at] + bytes([draw(st.integers(0, 255))]) + valid[at + 1 :]
    if kind == "inserted":
        at = draw(st.integers(0, len(valid)))
        junk = draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x00", b"\xef\xbb\xbf"]))
        return valid[:at] + junk + valid[at:]
    if kind == "binary":
        return draw(st.binary(max_size=64))
    return draw(
        st.sampled_from(
            [
                _utf16(door),
                json.dumps(VALID[door]).encode("utf-32"),
                json.dumps(VALID[door], ensure_ascii=False)
                .replace("Hello", "Héllo")
                .encode("latin-1"),
                b"\xef\xbb\xbf" + valid,  # allowed
                b"\n\t " + valid + b"\r\n",  # allowed
            ]
        )
    )


@dataclass(frozen=True, repr=False)
class Case(Compact):
    door: str
    path: str
    body: bytes
    content_type: bytes | None


@st.composite
def cases(draw: st.DrawFn) -> Case:
    door = draw(st.sampled_from(sorted(SPELLINGS)))
    content_type = draw(
        st.sampled_from(
            [None, b"application/json", b"text/plain", b"multipart/form-data; boundary=xyz"]
        )
    )
    return Case(door, draw(st.sampled_from(SPELLINGS[door])), draw(bodies(door)), content_type)


def verdict(door: str, body: bytes) -> bool | None:
    parses, value = parse_like_the_gateway(body)
    if not parses:
        return True
    if door == CHAT:
        return openai_gateway_refuses(value)
    return anthropic_gateway_refuses(door, value)


async def test_what_is_not_a_json_object_is_refused_at_every_door() -> None:
    async with gateway() as gw:

        async def check(case: Case) -> None:
            headers = [(b"anthropic-version", b"2023-06-01")] if case.door != CHAT else []
            if case.content_type is not None:
                headers.append((b"content-type", case.content_type))
            ex = await gw.exchange("POST", case.path, case.body, headers)
            check_answer(
                ex,
                refused=verdict(case.door, case.body),
                openai_upstream_may_refuse=model_not_served,
            )

        await explore(cases(), check, max_examples=250)


# -- keys ------------------------------------------------------------------------------------

KEYS: Final = ("pk-right", "pk-other")
KEY_HEADERS: Final = (b"authorization", b"api-key", b"x-api-key")
KEY_VALUES: Final = (
    b"Bearer pk-right",
    b"bearer pk-right",
    b"BEARER   pk-right",
    b"Bearer pk-other",
    b"Bearer pk-wrong",
    b"Bearer pk-right pk-right",
    b"Bearer",
    b"Basic pk-right",
    b"pk-right",
    b"pk-other",
    b"pk-right,pk-right",
    b"PK-RIGHT",
    b"",
    b"\xff",
    b"Bearer \xe9",
)


def _bearer(value: str | None) -> str | None:
    scheme, _, token = (value or "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def expected_key(headers: list[tuple[bytes, bytes]]) -> str | None:
    """The key the documentation says counts: ``Authorization: Bearer``, else ``api-key``,
    else ``x-api-key``; the first line of each header."""
    first: dict[bytes, str] = {}
    for name, value in headers:
        first.setdefault(name, value.decode("latin-1").strip())
    token = _bearer(first.get(b"authorization"))
    if token is not None:
        return token
    for name in (b"api-key", b"x-api-key"):
        value = first.get(name, "").strip()
        if value:
            return value
    return None


@dataclass(frozen=True, repr=False)
class KeyCase(Compact):
    door: str
    body: bytes
    headers: tuple[tuple[bytes, bytes], ...]


key_cases = st.builds(
    KeyCase,
    door=st.sampled_from(sorted(SPELLINGS)),
    body=st.sampled_from([b"{", b"[]", b""]) | st.just(b"valid"),
    headers=st.lists(
        st.tuples(st.sampled_from(KEY_HEADERS), st.sampled_from(KEY_VALUES)), max_size=4
    ).map(tuple),
)


async def test_a_wrong_or_missing_key_is_a_401_before_anything_else() -> None:
    async with gateway(proxy_api_keys=KEYS) as gw:

        async def check(case: KeyCase) -> None:
            body = json.dumps(VALID[case.door]).encode() if case.body == b"valid" else case.body
            headers = list(case.headers)
            if case.door != CHAT:
                headers.append((b"anthropic-version", b"2023-06-01"))
            ex = await gw.exchange("POST", case.door, body, headers)
            if expected_key(headers) in KEYS:
                assert ex.status != 401, str(ex)
                check_answer(ex, refused=verdict(case.door, body))
            else:
                assert ex.status == 401, str(ex)
                check_answer(ex, refused=True)
                assert b"pk-" not in ex.body, str(ex)  # no key, right or wrong, is echoed

        await explore(key_cases, check, max_examples=120)
