"""Codex CLI for the tests: finding (or installing) the ``codex`` launcher, its
configuration, running ``codex exec`` as a child process under trio, and a recording relay
that keeps what Codex sends on the wire.

Unlike Claude Code's tests (``claude_code_support.py``), the gateway here is the in-process
proxy and simulator of ``support.py``, in the test's nursery; only Codex is a process. It
runs under ``trio.run_process`` in a session of its own, so a timeout kills it together with
the native binary its Node launcher starts and any command it runs; its output goes to files,
never to pipes nobody reads, and is kept for the failure message.

Where ``codex`` comes from, first match wins:

1. ``$TRIO_BATCHER_CODEX``: a path to a ``codex`` executable;
2. the project's own install, ``tests/.cache/codex`` (pinned to ``VERSION``);
3. a ``codex`` on ``PATH`` that reports ``VERSION`` (Codex's wire format changes between
   releases; another version is not what these tests describe);
4. otherwise, if ``npm`` is on ``PATH``, ``npm install`` of ``PACKAGE`` into that cache
   directory, once (later runs find it in step 2). The package is a Node launcher plus a
   native binary for the platform (an npm optional dependency), about 400 MB unpacked.

When none of these works the tests skip with the reason -- or fail, where
``TRIO_BATCHER_REQUIRE_CODEX=1`` says Codex must run (CI), so CI cannot pass by skipping.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Final

import httpx2
import trio
from npm_cache import NpmUnavailable, first_working, npm_install

from trio_batcher.serving import serve_app

VERSION: Final = "0.169.0"
PACKAGE: Final = f"@openai/codex@{VERSION}"
CACHE_DIR: Final = Path(__file__).parent / ".cache" / "codex"
BINARY_ENV: Final = "TRIO_BATCHER_CODEX"
REQUIRE_ENV: Final = "TRIO_BATCHER_REQUIRE_CODEX"
INSTALL_TIMEOUT_S: Final = 600.0  # a cold npm cache downloads ~150 MB
PROVIDER: Final = "gw"
KEY_ENV: Final = "GW_KEY"

# What keeps Codex on loopback (command-line overrides, so config.toml stays exactly what a
# user writes): without them `codex exec` syncs its curated plugin catalogue at start-up
# (git ls-remote / api.github.com / chatgpt.com) and sends analytics.
OFFLINE_OVERRIDES: Final = ("features.plugins=false", "analytics.enabled=false")


Unavailable = NpmUnavailable  # what the tests catch to skip


@dataclass(frozen=True)
class Codex:
    """How to start Codex: ``command`` is the executable, possibly behind ``node``."""

    command: tuple[str, ...]
    version: str
    source: str


def find_codex() -> Codex:
    """Codex from the first source that has it (see the module docstring).

    Raises:
      Unavailable: none has it and it cannot be installed.
    """
    explicit = os.environ.get(BINARY_ENV)
    if explicit:
        return _checked((explicit,), f"${BINARY_ENV}")
    cached = _cached()
    if cached is not None:
        return cached
    on_path = shutil.which("codex")
    if on_path is not None:
        try:
            found = _checked((on_path,), "PATH")
        except Unavailable:
            found = None
        if found is not None and found.version == VERSION:
            return found
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        raise Unavailable(
            f"Codex CLI {VERSION} is not installed and there is no node/npm to install it "
            f"with (install Node.js and npm, or set {BINARY_ENV} to a codex {VERSION})"
        )
    return _install(npm)


def _launchers(prefix: Path) -> list[tuple[str, ...]]:
    """The ways to start an npm install under ``prefix``: its ``.bin`` link, else the
    package's Node launcher run by ``node`` (for an npm that made no links)."""
    launchers: list[tuple[str, ...]] = [(str(prefix / "node_modules" / ".bin" / "codex"),)]
    node = shutil.which("node")
    if node is not None:
        script = prefix / "node_modules" / "@openai" / "codex" / "bin" / "codex.js"
        launchers.append((node, str(script)))
    return launchers


def _cached() -> Codex | None:
    return first_working(_launchers(CACHE_DIR), _checked, VERSION, str(CACHE_DIR))


def _checked(command: tuple[str, ...], source: str) -> Codex:
    """``command`` if ``command --version`` answers like Codex (``codex-cli 0.169.0``)."""
    try:
        with tempfile.TemporaryDirectory(prefix="codex-home.") as home:
            done = subprocess.run(
                [*command, "--version"],
                capture_output=True,
                text=True,
                timeout=60,
                stdin=subprocess.DEVNULL,
                env=codex_env(Path(home)),
            )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise Unavailable(f"{' '.join(command)} (from {source}) does not run: {exc}") from exc
    words = done.stdout.split()
    if done.returncode != 0 or len(words) < 2 or words[0] != "codex-cli":
        raise Unavailable(
            f"{' '.join(command)} (from {source}) is not a working Codex CLI: "
            f"exit {done.returncode}, {(done.stdout + done.stderr).strip()[-500:]!r}"
        )
    return Codex(command, words[1], source)


def _install(npm: str) -> Codex:
    return npm_install(
        npm,
        PACKAGE,
        CACHE_DIR,
        cached=_cached,
        launchers=_launchers,
        timeout_s=INSTALL_TIMEOUT_S,
    )


# --------------------------------------------------------------------------- running it


def codex_env(home: Path, **extra: str) -> dict[str, str]:
    """A hermetic environment for Codex: its own HOME and CODEX_HOME (the same directory),
    none of the caller's ``OPENAI_*``/``CODEX_*`` settings or proxies."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "CODEX_HOME": str(home),
        "LANG": "C.UTF-8",
    }
    env.update(extra)
    return env


def write_config(codex_home: Path, base_url: str, model: str) -> Path:
    """``$CODEX_HOME/config.toml`` pointing Codex at the gateway, as a user writes it
    (SURFACES.md section 2): the key comes from ``$GW_KEY``, the wire API is Responses."""
    path = codex_home / "config.toml"
    path.write_text(
        f"model = {json.dumps(model)}\n"
        f"model_provider = {json.dumps(PROVIDER)}\n"
        "\n"
        f"[model_providers.{PROVIDER}]\n"
        'name = "trio-batcher"\n'
        f"base_url = {json.dumps(base_url)}\n"
        f"env_key = {json.dumps(KEY_ENV)}\n"
        'wire_api = "responses"\n'
    )
    return path


@dataclass(frozen=True)
class Finished:
    codex: Codex
    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    seconds: float

    def describe(self) -> str:
        return (
            f"Codex {self.codex.version} ({self.codex.source}) {' '.join(self.args)!r}: "
            f"exit {self.returncode} after {self.seconds:.1f} s\n"
            f"--- stdout\n{self.stdout[-3000:]}\n--- stderr\n{self.stderr[-3000:]}"
        )


async def _kill_group(proc: trio.Process) -> None:
    # The launcher, the native binary it starts, and whatever command Codex is running.
    with suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


async def run_codex(
    codex: Codex,
    args: Sequence[str],
    env: Mapping[str, str],
    cwd: Path,
    logs: Path,
) -> Finished:
    """Run ``codex *args`` to its end, its output in ``logs/stdout`` and ``logs/stderr``.

    Put a deadline around the call: when it is cancelled, Codex's whole process group is
    killed, and ``describe_logs(logs)`` tells what it had printed by then.
    """
    started = time.monotonic()
    await trio.Path(logs).mkdir(parents=True, exist_ok=True)
    async with (
        await trio.open_file(logs / "stdout", "wb") as stdout,
        await trio.open_file(logs / "stderr", "wb") as stderr,
    ):
        done = await trio.run_process(
            [*codex.command, *args],
            env=dict(env),
            cwd=cwd,
            stdin=b"",  # `codex exec` reads more prompt from a non-tty stdin until EOF
            stdout=stdout.wrapped,
            stderr=stderr.wrapped,
            check=False,
            start_new_session=True,
            deliver_cancel=_kill_group,
        )
    return Finished(
        codex,
        tuple(args),
        done.returncode,
        await trio.Path(logs / "stdout").read_text(errors="replace"),
        await trio.Path(logs / "stderr").read_text(errors="replace"),
        time.monotonic() - started,
    )


def describe_logs(logs: Path) -> str:
    """What a run killed by its deadline had printed."""
    parts = []
    for name in ("stdout", "stderr"):
        path = logs / name
        text = path.read_text(errors="replace") if path.exists() else "(none)"
        parts.append(f"--- {name}\n{text[-3000:]}")
    return "\n".join(parts)


# --------------------------------------------------------------------------- the wire


@dataclass(frozen=True)
class Exchange:
    """One request Codex made and the gateway's answer, as they crossed the relay."""

    method: str
    path: str
    headers: dict[str, str]  # lower-case names; a repeated header keeps its last value
    body: Any  # parsed JSON, or None
    status: int
    response_headers: dict[str, str]
    response_body: bytes


# Hop-by-hop (RFC 9110 section 7.6.1) and framing headers: the relay's server sets its own.
_HOP: Final = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "host"}
)


@dataclass
class RecordingRelay:
    """An ASGI app that forwards every request to ``target`` unchanged, streams the answer
    back as it comes, and records both in ``exchanges`` -- what Codex really sent, for
    the tests to compare with what reached the upstream."""

    target: str
    exchanges: list[Exchange] = field(default_factory=list)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                kind = (await receive())["type"]
                if kind == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif kind == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        assert scope["type"] == "http", scope["type"]
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = b"".join(chunks)
        headers = [(k.decode(), v.decode()) for k, v in scope["headers"]]
        url = (
            self.target
            + scope["path"]
            + (f"?{scope['query_string'].decode()}" * bool(scope["query_string"]))
        )
        received = bytearray()
        async with (
            httpx2.AsyncClient(timeout=None) as client,
            client.stream(
                scope["method"],
                url,
                content=body,
                headers=[(k, v) for k, v in headers if k.lower() not in _HOP | {"content-length"}],
            ) as response,
        ):
            out = [
                (k.encode(), v.encode())
                for k, v in response.headers.multi_items()
                if k.lower() not in _HOP
            ]
            await send(
                {"type": "http.response.start", "status": response.status_code, "headers": out}
            )
            async for chunk in response.aiter_raw():
                received += chunk
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        try:
            parsed: Any = json.loads(body) if body else None
        except ValueError:
            parsed = None
        self.exchanges.append(
            Exchange(
                scope["method"],
                scope["path"],
                {k.lower(): v for k, v in headers},
                parsed,
                response.status_code,
                {k.lower(): v for k, v in response.headers.items()},
                bytes(received),
            )
        )


@asynccontextmanager
async def recording_relay(target: str) -> AsyncIterator[tuple[str, RecordingRelay]]:
    """A ``RecordingRelay`` to ``target`` on 127.0.0.1, yielding its base URL; stopped
    gracefully (never merely cancelled) however the block ends."""
    relay = RecordingRelay(target)
    stop, stopped = trio.Event(), trio.Event()

    async def run(task_status: trio.TaskStatus[tuple[str, int]]) -> None:
        try:
            await serve_app(relay, shutdown=stop, graceful_timeout=5.0, task_status=task_status)
        finally:
            stopped.set()

    async with trio.open_nursery() as nursery:
        host, port = await nursery.start(partial(run))
        try:
            yield f"http://{host}:{port}", relay
        finally:
            stop.set()
            with trio.CancelScope(shield=True), trio.move_on_after(15):
                await stopped.wait()


def sse_events(body: bytes) -> list[dict[str, Any]]:
    """The ``data:`` JSON of each event in an SSE body."""
    events = []
    for line in body.decode().splitlines():
        if line.startswith("data:"):
            events.append(json.loads(line[5:]))
    return events


def dumps(data: Any) -> str:
    return json.dumps(data, indent=1, sort_keys=True, default=str)[:6000]
