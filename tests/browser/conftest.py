"""Fixtures for the browser tests: headless Chromium driven by Playwright's sync API.

These are not trio tests: Playwright runs its own event loop, and the proxy under test runs
as a child process (``trio-batcher serve --simulate``). Everything skips, with the reason,
when the ``playwright`` package or a Chromium executable is missing, so the default test run
needs neither. Install: ``pip install playwright`` and Debian's ``chromium`` (never
``playwright install``, which downloads its own browser builds).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any, NoReturn

import pytest
from browser_support import CHROMIUM_ARGS, LiveProxy, Opened, chromium_path, running_proxy


def pytest_configure(config: pytest.Config) -> None:
    # Until pyproject.toml lists it (--strict-markers rejects unknown markers).
    config.addinivalue_line(
        "markers", "browser: drives headless Chromium through Playwright (skips without them)"
    )


def _unavailable(reason: str) -> NoReturn:
    """Skip, or fail where the browser is required (``TRIO_BATCHER_REQUIRE_BROWSER=1``: the
    ``browser`` nox session, so CI cannot pass by skipping everything)."""
    if os.environ.get("TRIO_BATCHER_REQUIRE_BROWSER") == "1":
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("the playwright package is not installed (pip install playwright)")
    executable = chromium_path()
    if executable is None:
        _unavailable("no Chromium executable (apt-get install chromium, or set CHROMIUM)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def open_page(browser: Any) -> Iterator[Callable[..., Opened]]:
    """``open_page(url)`` → an :class:`Opened` page, loaded until the page marks itself ready.

    ``routes``: URL glob → Playwright route handler, installed before the page loads (to
    answer a request with a document the test made).
    """
    contexts: list[Any] = []

    def opener(
        url: str,
        ready: str = "body[data-ready='1']",
        routes: Mapping[str, Callable[[Any], None]] | None = None,
    ) -> Opened:
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        contexts.append(context)
        page = context.new_page()
        for pattern, handler in (routes or {}).items():
            page.route(pattern, handler)
        opened = Opened(page)
        page.on(
            "console",
            lambda m: opened.errors.append(f"{m.type}: {m.text}") if m.type == "error" else None,
        )
        page.on("pageerror", lambda e: opened.errors.append(f"pageerror: {e}"))
        page.goto(url)
        page.wait_for_selector(ready, timeout=15_000)
        return opened

    yield opener
    for context in contexts:
        context.close()


@pytest.fixture(scope="module")
def live_proxy(browser: Any) -> Iterator[LiveProxy]:
    """A proxy child process; asks for ``browser`` first so it is not started to be skipped."""
    with running_proxy() as proxy:
        yield proxy
