"""Developer and CI sessions: `nox` runs lint, typecheck and tests (the README's test command)."""

from __future__ import annotations

import nox

nox.options.sessions = ["lint", "typecheck", "tests"]
nox.options.reuse_existing_virtualenvs = True
nox.options.error_on_missing_interpreters = True

PACKAGE = "trio_batcher"


@nox.session
def lint(session: nox.Session) -> None:
    """ruff: lint and formatting."""
    session.install("ruff>=0.6")
    session.run("ruff", "check", PACKAGE, "tests", "visuals", "noxfile.py")
    session.run("ruff", "format", "--check", PACKAGE, "tests", "visuals", "noxfile.py")


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy --strict on the package."""
    session.install("-e", ".[test,bench]", "mypy>=1.10")
    session.run("mypy", "--strict", PACKAGE)


@nox.session
def tests(session: nox.Session) -> None:
    """The test suite, over loopback only (no network, no API key)."""
    session.install("-e", ".[test,bench]")
    session.run("pytest", *session.posargs)


@nox.session
def bench(session: nox.Session) -> None:
    """trio-batcher bench: separate processes, real sockets. Flags after --, e.g. -- --quick."""
    session.install("-e", ".[bench]")
    session.run("trio-batcher", "bench", *(session.posargs or ["--scenario", "all"]))


@nox.session
def browser(session: nox.Session) -> None:
    """The visuals in headless Chromium: Debian's `chromium` driven by Playwright.

    Never `playwright install` (it downloads a browser); CI installs Debian's chromium.
    """
    session.install("-e", ".[test,bench,browser]")
    session.run(
        "pytest",
        "-m",
        "browser",
        "tests/browser",
        *session.posargs,
        env={"TRIO_BATCHER_REQUIRE_BROWSER": "1"},
    )
