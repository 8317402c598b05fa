"""Claude Code for the tests: finding (or installing) the ``claude`` binary, running the
gateway as a child process, and running ``claude -p`` against it.

These are plain processes and blocking calls, not trio: Claude Code is a native binary (a
Bun build shipped through npm), and the gateway under test is ``trio-batcher serve
--simulate`` exactly as a user starts it. Every wait has a subprocess timeout; nothing sleeps
for a margin.

Where ``claude`` comes from, first match wins:

1. ``$TRIO_BATCHER_CLAUDE_CODE``: a path to a ``claude`` executable;
2. the project's own install, ``tests/.cache/claude-code`` (pinned to ``VERSION``);
3. a ``claude`` on ``PATH``;
4. otherwise, if ``npm`` is on ``PATH``, ``npm install`` of ``PACKAGE`` into that cache
   directory, once (later runs find it in step 2).

When none of these works the tests skip with the reason -- or fail, where
``TRIO_BATCHER_REQUIRE_CLAUDE_CODE=1`` says Claude Code must run (CI), so CI cannot pass by
skipping.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import httpx2
from npm_cache import NpmUnavailable, first_working, npm_install

from trio_batcher.settings import SPECS

VERSION: Final = "2.1.328"
PACKAGE: Final = f"@anthropic-ai/claude-code@{VERSION}"
CACHE_DIR: Final = Path(__file__).parent / ".cache" / "claude-code"
BINARY_ENV: Final = "TRIO_BATCHER_CLAUDE_CODE"
REQUIRE_ENV: Final = "TRIO_BATCHER_REQUIRE_CLAUDE_CODE"
INSTALL_TIMEOUT_S: Final = 600.0  # a cold npm cache downloads ~100 MB

# What keeps Claude Code on loopback: without these it also calls api.anthropic.com
# directly (MCP registry, event logging) and sends `HEAD /api/hello` to the base URL.
OFFLINE_ENV: Final = {
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_AUTOUPDATER": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
}


Unavailable = NpmUnavailable  # what the tests catch to skip


@dataclass(frozen=True)
class ClaudeCode:
    """How to start Claude Code: ``command`` is the executable, possibly behind ``node``."""

    command: tuple[str, ...]
    version: str
    source: str


def find_claude_code() -> ClaudeCode:
    """Claude Code from the first source that has it (see the module docstring).

    Raises:
      Unavailable: none has it and it cannot be installed.
    """
    explicit = os.environ.get(BINARY_ENV)
    if explicit:
        return _checked((explicit,), f"${BINARY_ENV}")
    cached = _cached()
    if cached is not None:
        return cached
    on_path = shutil.which("claude")
    if on_path is not None:
        return _checked((on_path,), "PATH")
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        raise Unavailable(
            "Claude Code is not installed and there is no node/npm to install it with "
            f"(install Node.js and npm, put `claude` on PATH, or set {BINARY_ENV})"
        )
    return _install(npm)


def _launchers(prefix: Path) -> list[tuple[str, ...]]:
    """The ways to start an npm install under ``prefix``: the native binary the
    postinstall put in place, else the package's own Node launcher (for an npm that ran no
    install scripts)."""
    package = prefix / "node_modules" / "@anthropic-ai" / "claude-code"
    launchers = [(str(prefix / "node_modules" / ".bin" / "claude"),)]
    node = shutil.which("node")
    if node is not None:
        launchers.append((node, str(package / "cli-wrapper.cjs")))
    return launchers


def _cached() -> ClaudeCode | None:
    return first_working(_launchers(CACHE_DIR), _checked, VERSION, str(CACHE_DIR))


def _checked(command: tuple[str, ...], source: str) -> ClaudeCode:
    """``command`` if ``command --version`` answers like Claude Code."""
    try:
        with tempfile.TemporaryDirectory(prefix="claude-home.") as home:
            done = subprocess.run(
                [*command, "--version"],
                capture_output=True,
                text=True,
                timeout=60,
                stdin=subprocess.DEVNULL,
                env=claude_env(Path(home)),
            )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise Unavailable(f"{' '.join(command)} (from {source}) does not run: {exc}") from exc
    if done.returncode != 0 or "Claude Code" not in done.stdout:
        raise Unavailable(
            f"{' '.join(command)} (from {source}) is not a working Claude Code: "
            f"exit {done.returncode}, {(done.stdout + done.stderr).strip()[-500:]!r}"
        )
    return ClaudeCode(command, done.stdout.split()[0], source)


def _install(npm: str) -> ClaudeCode:
    return npm_install(
        npm,
        PACKAGE,
        CACHE_DIR,
        cached=_cached,
        launchers=_launchers,
        timeout_s=INSTALL_TIMEOUT_S,
    )


# --------------------------------------------------------------------------- running it


def claude_env(home: Path, **extra: str) -> dict[str, str]:
    """A hermetic environment for Claude Code: its own HOME, none of the caller's
    ``ANTHROPIC_*``/``CLAUDE_*`` settings or proxies, and no traffic but to the base URL."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8"}
    env.update(OFFLINE_ENV)
    env.update(extra)
    return env


@dataclass(frozen=True)
class Finished:
    claude: ClaudeCode
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    def describe(self) -> str:
        return (
            f"Claude Code {self.claude.version} ({self.claude.source}): "
            f"exit {self.returncode} after {self.seconds:.1f} s\n"
            f"--- stdout\n{self.stdout[-3000:]}\n--- stderr\n{self.stderr[-3000:]}"
        )


def run_claude(
    claude: ClaudeCode,
    args: Sequence[str],
    env: Mapping[str, str],
    cwd: Path,
    *,
    timeout: float,
) -> Finished:
    """Run Claude Code to its end; past ``timeout`` its whole process group is killed and
    the call fails with what it had printed so far."""
    started = time.monotonic()
    proc = subprocess.Popen(
        [*claude.command, *args],
        env=dict(env),
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its tools' children go with it on a timeout
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate(timeout=30)
        raise AssertionError(
            f"Claude Code {claude.version} ({claude.source}), {' '.join(args)!r}: "
            f"did not finish within {timeout:.0f} s\n"
            f"--- stdout\n{stdout[-3000:]}\n--- stderr\n{stderr[-3000:]}"
        ) from None
    return Finished(claude, proc.returncode, stdout, stderr, time.monotonic() - started)


# --------------------------------------------------------------------------- the gateway


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


METRICS_TOKEN: Final = "mt-claude-code-tests"


@dataclass
class Gateway:
    url: str
    key: str
    proc: subprocess.Popen[bytes]
    log: Path

    def metrics(self) -> dict[str, Any]:
        """The whole view (``by_surface``): the client key would read its tenant's only."""
        reply = httpx2.get(
            f"{self.url}/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}, timeout=10
        )
        assert reply.status_code == 200, reply.text
        data: dict[str, Any] = reply.json()
        return data

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


@contextmanager
def running_gateway(key: str, workdir: Path, *extra_args: str) -> Iterator[Gateway]:
    """``trio-batcher serve --simulate`` in a child process, healthy when yielded; stopped
    with SIGTERM afterwards (and checked to have exited cleanly)."""
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k not in {s.env for s in SPECS}}
    env.update(PROXY_API_KEYS=key, METRICS_ENABLED="1", METRICS_TOKEN=METRICS_TOKEN)
    args = [sys.executable, "-m", "trio_batcher", "serve", "--simulate", "--port", str(port)]
    log = workdir / "gateway.log"
    # A file, not a pipe: nobody reads the log while the tests run, and a full pipe would
    # block the gateway.
    with open(log, "wb") as out:
        proc = subprocess.Popen([*args, *extra_args], env=env, stdout=out, stderr=subprocess.STDOUT)
    gateway = Gateway(f"http://127.0.0.1:{port}", key, proc, log)
    try:
        _wait_healthy(gateway)
        yield gateway
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
    assert proc.returncode == 0, gateway.log_text()
    assert "Traceback" not in gateway.log_text(), gateway.log_text()


def _wait_healthy(gateway: Gateway, timeout: float = 60.0) -> None:
    # Polling is the only option: the gateway is another process, with no event to wait on.
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert gateway.proc.poll() is None, gateway.log_text()
        try:
            if httpx2.get(f"{gateway.url}/health", timeout=1).status_code == 200:
                return
        except httpx2.TransportError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"{gateway.url} did not become healthy:\n{gateway.log_text()}")


def surface_requests(metrics: Mapping[str, Any], surface: str) -> dict[str, Any]:
    """``by_surface[surface].requests`` of a ``GET /metrics`` snapshot (zeros if absent)."""
    entry = metrics.get("by_surface", {}).get(surface)
    if entry is None:
        return {"total": 0, "success": 0, "error": 0, "stream": 0, "by_status": {}}
    requests: dict[str, Any] = entry["requests"]
    return requests


def delta(after: Mapping[str, Any], before: Mapping[str, Any]) -> dict[str, Any]:
    """``after - before`` for a ``requests`` block (``by_status`` included)."""
    out: dict[str, Any] = {k: after[k] - before[k] for k in ("total", "success", "error", "stream")}
    statuses = set(after["by_status"]) | set(before["by_status"])
    by_status = {s: after["by_status"].get(s, 0) - before["by_status"].get(s, 0) for s in statuses}
    out["by_status"] = {s: n for s, n in sorted(by_status.items()) if n}
    return out


def dumps(data: Any) -> str:
    return json.dumps(data, indent=1, sort_keys=True)
