"""Optional: sample the proxy with py-spy while a phase runs (``bench --profile DIR``).

py-spy attaches to the proxy's pid from outside (no code in the proxy, ``--nonblocking`` so
the proxy is never paused) and writes collapsed stacks (``frame;frame;frame count`` lines,
readable by speedscope, inferno or flamegraph.pl) when it gets SIGINT at the end of the
phase. ``summarize_folded`` turns that file into the two views that answer "where does the
proxy's CPU go": each sample attributed to the innermost *component* on its stack (the
outbound HTTP client, the inbound server, Quart, our own modules, trio itself), and the
hottest functions by self time.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

import trio

__all__ = ["COMPONENTS", "profiled", "py_spy", "summarize_folded"]

# Innermost match wins: a socket write inside httpcore2 (through the pool's network stream)
# is the outbound client's cost.
COMPONENTS: Final[tuple[tuple[str, tuple[str, ...]], ...]] = (
    (
        "outbound client (httpcore2, upstream pool)",
        ("httpx2/", "httpcore2/", "trio_batcher/upstream/pool.py"),
    ),
    ("trio_batcher.translation", ("trio_batcher/translation/",)),
    ("trio_batcher.observatory", ("trio_batcher/observatory/",)),
    ("trio_batcher.upstream.sse", ("trio_batcher/upstream/sse.py",)),
    ("trio_batcher.admission", ("trio_batcher/admission/",)),
    ("trio_batcher (other modules)", ("trio_batcher/",)),
    ("quart, quart_trio, werkzeug", ("quart/", "quart_trio/", "werkzeug/")),
    ("hypercorn (inbound HTTP)", ("hypercorn/",)),
    ("json", ("json/",)),
)
_LINE: Final = re.compile(r":\d+\)$")


def py_spy() -> str | None:
    """The py-spy executable: next to this Python first (a venv), then on PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    if beside.exists():
        return str(beside)
    return shutil.which("py-spy")


@asynccontextmanager
async def profiled(pid: int, out: Path, log: Path) -> AsyncIterator[None]:
    """Record ``pid`` with py-spy into ``out`` (collapsed stacks) while the block runs.

    Raises:
      FileNotFoundError: py-spy is not installed (``pip install py-spy``).
    """
    exe = py_spy()
    if exe is None:
        raise FileNotFoundError("--profile needs py-spy: pip install py-spy")
    await trio.Path(out.parent).mkdir(parents=True, exist_ok=True)
    argv = [exe, "record", "--nonblocking", "--rate", "250", "--format", "raw"]
    with log.open("ab") as sink:
        process = await trio.lowlevel.open_process(
            [*argv, "--output", str(out), "--pid", str(pid)],
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:
        await trio.sleep(0.2)  # let it attach before the load starts
        yield
    finally:
        with trio.CancelScope(shield=True):
            if process.poll() is None:
                process.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
                with trio.move_on_after(20):
                    await process.wait()
                if process.poll() is None:
                    process.kill()
                    await process.wait()


def summarize_folded(text: str, top: int = 15) -> dict[str, Any]:
    """Share of samples per component (innermost owner) and the hottest self-time frames."""
    components: Counter[str] = Counter()
    frames: Counter[str] = Counter()
    total = 0
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        calls = stack.split(";")
        frames[_LINE.sub(")", calls[-1])] += n
        owner = "trio and the rest"
        for frame in reversed(calls):
            if "trio_batcher/cli.py" in frame or "trio_batcher/__main__.py" in frame:
                break  # the outermost frames of every stack: nothing inner claimed it
            found = next((name for name, keys in COMPONENTS if any(k in frame for k in keys)), None)
            if found is not None:
                owner = found
                break
        components[owner] += n
    if not total:
        return {"samples": 0, "components_pct": {}, "top_self_pct": {}}
    return {
        "samples": total,
        "components_pct": {k: round(v / total * 100, 1) for k, v in components.most_common()},
        "top_self_pct": {k: round(v / total * 100, 1) for k, v in frames.most_common(top)},
    }
