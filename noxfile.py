"""Developer and CI sessions: `nox` runs lint, typecheck and tests (the README's test command).

Every session installs through ``constraints.txt``: the exact versions the suite last
passed with, so a fresh clone tests what was tested. ``nox -s tests_latest`` runs the suite
against the newest release of every dependency instead (run it before each landing), and
``nox -s lock`` rewrites ``constraints.txt`` from the newest releases once they pass.
"""

from __future__ import annotations

from pathlib import Path

import nox

nox.options.sessions = ["lint", "typecheck", "tests"]
nox.options.reuse_existing_virtualenvs = True
nox.options.error_on_missing_interpreters = True

PACKAGE = "trio_batcher"
# The benchmark lab: its own distribution in bench/, installed beside the gateway by the
# sessions that run or test it; never part of the gateway's wheel.
LAB = "./bench"
LAB_PACKAGE = "bench/trio_batcher_bench"
CONSTRAINTS = "constraints.txt"
# Everything any session installs, for ``lock`` to resolve together.
EVERYTHING = (".[test,browser]", LAB, "ruff", "mypy", "nox")


def _install(session: nox.Session, *args: str) -> None:
    """Install ``args`` at the versions in ``constraints.txt``."""
    session.install("-c", CONSTRAINTS, *args)


def _install_lab(session: nox.Session, *pins: str) -> None:
    """The lab, editable, as a plain path entry (``editable_mode=compat``): setuptools'
    default editable mode loads an import hook named after the lab
    (``__editable___trio_batcher_bench_..._finder``) into every interpreter of the
    session, which would put a ``bench`` module in ``sys.modules`` before the gateway
    imports anything."""
    session.install(*pins, "--config-settings", "editable_mode=compat", "-e", LAB)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff: lint and formatting."""
    _install(session, "ruff")
    session.run("ruff", "check", PACKAGE, "bench", "tests", "visuals", "noxfile.py")
    session.run("ruff", "format", "--check", PACKAGE, "bench", "tests", "visuals", "noxfile.py")


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy --strict on the package and the benchmark lab."""
    _install(session, "-e", ".[test]", "mypy")
    _install_lab(session, "-c", CONSTRAINTS)
    session.run("mypy", "--strict", PACKAGE, LAB_PACKAGE)


@nox.session
def tests(session: nox.Session) -> None:
    """The test suite, at the pinned versions (loopback only, no API key). The lab is
    installed too: tests/test_bench*.py test it, and the multi-process tests start servers
    with it."""
    _install(session, "-e", ".[test]")
    _install_lab(session, "-c", CONSTRAINTS)
    session.run("pytest", *session.posargs)


@nox.session
def tests_latest(session: nox.Session) -> None:
    """The test suite against the newest release of every dependency, ignoring the pins:
    what a user who runs ``pip install trio-batcher`` today gets. Run before each landing."""
    session.install("--upgrade", "--upgrade-strategy", "eager", "-e", ".[test]")
    _install_lab(session, "--upgrade", "--upgrade-strategy", "eager")
    session.run("pip", "list", "--format=freeze", silent=False)
    session.run("pytest", *session.posargs)


@nox.session
def lock(session: nox.Session) -> None:
    """Rewrite constraints.txt with the newest releases of everything the sessions install.

    Run ``nox -s tests_latest`` first: the pins should be versions the suite passed with.
    """
    session.install("--upgrade", "--upgrade-strategy", "eager", *EVERYTHING)
    frozen = session.run("pip", "freeze", "--exclude-editable", silent=True)
    assert isinstance(frozen, str)
    pins = sorted(
        (line for line in frozen.splitlines() if "==" in line and not line.startswith("-e")),
        key=str.lower,
    )
    header = (
        "# The versions the test suite last passed with: every nox session installs with\n"
        "# `pip install -c constraints.txt`. Regenerate with `nox -s lock` after\n"
        "# `nox -s tests_latest` passes.\n"
    )
    Path(CONSTRAINTS).write_text(header + "\n".join(pins) + "\n")
    session.log(f"wrote {len(pins)} pins to {CONSTRAINTS}")


@nox.session
def bench(session: nox.Session) -> None:
    """trio-batcher bench: separate processes, real sockets. Flags after --, e.g. -- --quick."""
    _install(session, "-e", ".")
    _install_lab(session, "-c", CONSTRAINTS)
    session.run("trio-batcher", "bench", *(session.posargs or ["--scenario", "all"]))


@nox.session
def browser(session: nox.Session) -> None:
    """The visuals in headless Chromium: Debian's `chromium` driven by Playwright.

    Never `playwright install` (it downloads a browser); CI installs Debian's chromium.
    """
    _install(session, "-e", ".[test,browser]")
    _install_lab(session, "-c", CONSTRAINTS)
    session.run(
        "pytest",
        "-m",
        "browser",
        "tests/browser",
        *session.posargs,
        env={"TRIO_BATCHER_REQUIRE_BROWSER": "1"},
    )
