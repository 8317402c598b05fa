"""Web origins: a page can call the gateway only from an origin it lists, or its own.

Live over loopback HTTP against the simulator, since what matters is what a browser would
see on the wire and whether the upstream was reached.
"""

from __future__ import annotations

import json

import httpx2
import pytest
from support import proxy_and_simulator

from trio_batcher.settings import Settings, SettingsError

HELLO = {"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "Hello there"}]}
PAGE = "http://localhost:3000"


async def test_a_drive_by_text_plain_post_from_another_site_is_403_and_spends_nothing() -> None:
    # What any web page may send without a preflight: a "simple" request.
    async with (
        proxy_and_simulator(metrics_enabled=True) as (url, sim),
        httpx2.AsyncClient() as http,
    ):
        response = await http.post(
            f"{url}/v1/chat/completions",
            content=json.dumps(HELLO),
            headers={"origin": "https://evil.example", "content-type": "text/plain"},
        )
        assert response.status_code == 403
        error = response.json()["error"]
        assert error["code"] == "origin_not_allowed"
        assert error["type"] == "permission_error"
        assert "CORS_ALLOW_ORIGINS" in error["message"]
        # The page may read why (and nothing else); caches keep answers per origin.
        assert response.headers["access-control-allow-origin"] == "https://evil.example"
        assert response.headers["vary"] == "Origin"
        assert (await sim.stats())["requests_total"] == 0
        metrics = (await http.get(f"{url}/metrics")).json()
        assert metrics["rejected"]["by_reason"] == {"origin_not_allowed": 1}


async def test_clients_without_an_origin_pass_and_a_rebinding_page_does_not() -> None:
    async with proxy_and_simulator() as (url, sim), httpx2.AsyncClient() as http:
        plain = await http.post(f"{url}/v1/chat/completions", json=HELLO)
        assert plain.status_code == 200
        assert "vary" not in plain.headers  # no CORS configured: nothing varies
        # DNS rebinding: the attacker's name resolves to the gateway, so Host and Origin
        # agree. Nothing in the request tells it from the gateway's own name.
        rebound = await http.post(
            f"{url}/v1/chat/completions",
            json=HELLO,
            headers={"host": "rebind.attacker.example", "origin": "http://rebind.attacker.example"},
        )
        assert rebound.status_code == 403
        assert (await sim.stats())["requests_total"] == 1


async def test_a_listed_origin_gets_its_preflight_and_readable_answers() -> None:
    async with (
        proxy_and_simulator(cors_allow_origins=(PAGE,)) as (url, sim),
        httpx2.AsyncClient() as http,
    ):
        preflight = await http.request(
            "OPTIONS",
            f"{url}/v1/chat/completions",
            headers={
                "origin": PAGE,
                "access-control-request-method": "POST",
                "access-control-request-headers": "authorization,content-type,x-stainless-os",
            },
        )
        assert preflight.status_code == 204
        assert preflight.headers["access-control-allow-origin"] == PAGE
        assert "POST" in preflight.headers["access-control-allow-methods"]
        assert preflight.headers["access-control-allow-headers"] == (
            "authorization,content-type,x-stainless-os"
        )
        assert int(preflight.headers["access-control-max-age"]) > 0
        assert "access-control-allow-credentials" not in preflight.headers

        no_origin = await http.get(f"{url}/v1/models")
        assert no_origin.headers["vary"] == "Origin"  # a shared cache must not mix the two
        assert "access-control-allow-origin" not in no_origin.headers
        reply = await http.post(f"{url}/v1/chat/completions", json=HELLO, headers={"origin": PAGE})
        assert reply.status_code == 200
        assert reply.headers["access-control-allow-origin"] == PAGE
        assert reply.headers["access-control-expose-headers"] == "*"
        assert "origin" in reply.headers["vary"].lower()

        body = {**HELLO, "stream": True}
        async with http.stream(
            "POST", f"{url}/v1/chat/completions", json=body, headers={"origin": PAGE}
        ) as stream:
            assert stream.status_code == 200
            assert stream.headers["access-control-allow-origin"] == PAGE
            assert (await stream.aread()).rstrip().endswith(b"data: [DONE]")

        # Errors must be readable too, or the page sees only "network error".
        bad = await http.post(f"{url}/v1/chat/completions", content=b"{", headers={"origin": PAGE})
        assert bad.status_code == 400
        assert bad.headers["access-control-allow-origin"] == PAGE
        models = await http.get(f"{url}/v1/models", headers={"origin": PAGE})
        assert models.status_code == 200
        assert models.headers["access-control-allow-origin"] == PAGE

        other = await http.request(
            "OPTIONS",
            f"{url}/v1/chat/completions",
            headers={"origin": "http://localhost:3001", "access-control-request-method": "POST"},
        )
        assert other.status_code == 403
        assert "access-control-allow-methods" not in other.headers  # the preflight fails
        assert (await sim.stats())["requests_total"] == 2


async def test_star_allows_any_page_but_keys_still_apply() -> None:
    async with (
        proxy_and_simulator(cors_allow_origins=("*",), proxy_api_keys=("k1",)) as (url, sim),
        httpx2.AsyncClient() as http,
    ):
        preflight = await http.request(
            "OPTIONS",
            f"{url}/v1/chat/completions",
            headers={"origin": "https://any.example", "access-control-request-method": "POST"},
        )
        assert preflight.status_code == 204  # preflights never carry credentials
        assert preflight.headers["access-control-allow-origin"] == "*"
        keyless = await http.post(
            f"{url}/v1/chat/completions", json=HELLO, headers={"origin": "https://any.example"}
        )
        assert keyless.status_code == 401
        assert keyless.headers["access-control-allow-origin"] == "*"
        keyed = await http.post(
            f"{url}/v1/chat/completions",
            json=HELLO,
            headers={"origin": "https://any.example", "authorization": "Bearer k1"},
        )
        assert keyed.status_code == 200
        assert (await sim.stats())["requests_total"] == 1


@pytest.mark.parametrize(
    ("raw", "parsed"),
    [
        ("", ()),
        ("*", ("*",)),
        (
            "http://localhost:3000, HTTPS://Chat.Example.com/",
            ("http://localhost:3000", "https://chat.example.com"),
        ),
        ("null", ("null",)),
        ("https://chat.example.com:443,http://x:80", ("https://chat.example.com", "http://x")),
        ("http://[::1]:8080", ("http://[::1]:8080",)),
        ("https://bücher.example", ("https://xn--bcher-kva.example",)),
        ("vscode-webview://abc123", ("vscode-webview://abc123",)),
    ],
)
def test_cors_allow_origins_parses_origins(raw: str, parsed: tuple[str, ...]) -> None:
    assert Settings.from_env({"CORS_ALLOW_ORIGINS": raw}).cors_allow_origins == parsed


@pytest.mark.parametrize(
    "raw",
    [
        "localhost:3000",
        "https://chat.example.com/app",
        "http://",
        "https://*.example.com",
        "http://user@x",
        "http://x:99999",
    ],
)
def test_cors_allow_origins_rejects_what_is_not_an_origin(raw: str) -> None:
    with pytest.raises(SettingsError, match="CORS_ALLOW_ORIGINS"):
        Settings.from_env({"CORS_ALLOW_ORIGINS": raw})


async def test_two_origin_headers_are_refused_whatever_they_say() -> None:
    async with (
        proxy_and_simulator(cors_allow_origins=("http://good.example",)) as (url, sim),
        httpx2.AsyncClient() as http,
    ):
        headers = [("origin", "http://evil.example"), ("origin", "http://good.example")]
        response = await http.post(f"{url}/v1/chat/completions", json=HELLO, headers=headers)
        assert response.status_code == 403
        assert (await sim.stats())["requests_total"] == 0
