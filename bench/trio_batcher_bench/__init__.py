"""The benchmark lab: the simulator and the proxy as real processes, real load, a report.

A separate distribution (``trio-batcher-bench``, ``bench/`` in the repository), never part of
the gateway's wheel: it drives an installed ``trio-batcher`` as any client would, through its
command line and its sockets, importing only the few of its modules it measures or reuses
(the settings table, ``percentile``, the upstream pool the floor runs on). ``trio-batcher
bench`` imports the lab by name when asked for it.

Public surface: ``build_parser(prog)`` is the parser of its flags, ``run_bench(args)`` runs it
and returns the exit status (0: every scenario's checks held; 1: a check failed or a scenario
broke; 128 + N: stopped by signal N, e.g. 130 for Ctrl-C). ``python -m trio_batcher_bench``
runs it stand-alone. See docs/benchmarks.md for the method and the report's schema.
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import signal
import subprocess
import sys
import time
import traceback
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

import trio

from .harness import Bench, Options
from .progress import Display
from .report import write_report
from .results import Report, ScenarioResult
from .scenarios import SCENARIOS

__all__ = ["SCENARIOS", "build_parser", "run_bench"]

DEFAULT_OUT = "bench-results/latest.json"
DEFAULT_VISUALS_JSON = "visuals/data/results.json"
VISUALS_GLOBAL = "BENCH_RESULTS"  # visuals/build_data.py: results.js sets window.BENCH_RESULTS


def _positive_float(raw: str) -> float:
    value = float(raw)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {raw}")
    return value


def _non_negative_float(raw: str) -> float:
    value = float(raw)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {raw}")
    return value


def _positive_int(raw: str) -> int:
    value = int(raw)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {raw}")
    return value


def _scenarios(raw: str) -> str:
    names = [name.strip() for name in raw.split(",") if name.strip()]
    unknown = [name for name in names if name not in SCENARIOS and name != "all"]
    if not names or unknown:
        raise argparse.ArgumentTypeError(
            f"unknown scenario {', '.join(unknown) or repr(raw)}; "
            f"choose from {', '.join(SCENARIOS)} or all"
        )
    return ",".join(names)


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--scenario",
        default="all",
        type=_scenarios,
        metavar="NAME",
        help=f"one of {', '.join(SCENARIOS)}, a comma-separated list, or all (the default: "
        f"every scenario but {', '.join(n for n, s in SCENARIOS.items() if not s.in_all)})",
    )
    parser.add_argument(
        "--quick", action="store_true", help="short phases (the whole suite in under two minutes)"
    )
    parser.add_argument(
        "--duration",
        type=_positive_float,
        default=None,
        metavar="S",
        help="seconds per measured phase and per overload step (default 15/8, quick 3/3)",
    )
    parser.add_argument(
        "--concurrency",
        type=_positive_int,
        default=None,
        metavar="N",
        help="closed-loop clients for overhead (default 50), stream (20), ratelimit (10) and "
        "cluster (300, quick 100)",
    )
    parser.add_argument(
        "--minutes",
        type=_positive_float,
        default=None,
        metavar="N",
        help="minutes of the soak's load (default 10, quick 2)",
    )
    parser.add_argument(
        "--warmup",
        type=_non_negative_float,
        default=None,
        metavar="S",
        help="unmeasured seconds before each closed-loop phase (default 3, quick 0.5)",
    )
    parser.add_argument(
        "--out",
        default=DEFAULT_OUT,
        metavar="PATH",
        help=f"JSON report; the markdown goes next to it as .md (default {DEFAULT_OUT})",
    )
    parser.add_argument(
        "--visuals-json",
        default=DEFAULT_VISUALS_JSON,
        metavar="PATH",
        help=f"a copy of the JSON for the pages, and the same as a script next to it (.js) "
        f"(default {DEFAULT_VISUALS_JSON}; '' = none)",
    )
    parser.add_argument(
        "--logs",
        default=None,
        metavar="DIR",
        help="server logs (default: a logs/ directory next to --out)",
    )
    parser.add_argument(
        "--profile",
        default=None,
        metavar="DIR",
        help="sample the proxy with py-spy during each phase through it; collapsed stacks "
        "go to DIR and a summary into the report (needs: pip install py-spy)",
    )
    parser.add_argument(
        "--litellm",
        default=None,
        metavar="PATH",
        help="a LiteLLM proxy executable (installed on its own, e.g. in a scratch venv) for "
        "the peers scenario to run the same loads through; without it, peers compares the "
        "proxy with direct and the floor only",
    )
    parser.add_argument(
        "--storm-retry-after",
        choices=["yes", "no", "both"],
        default="both",
        help="failover: whether the storm's 529s carry retry-after (yes), carry none as "
        "Anthropic's usually do (no), or one run of each (both, the default)",
    )
    parser.add_argument(
        "--no-progress", action="store_true", help="plain progress lines even on a terminal"
    )
    parser.add_argument(
        "--log-level", default="warning", choices=["debug", "info", "warning", "error"]
    )


def build_parser(prog: str = "python -m trio_batcher_bench") -> argparse.ArgumentParser:
    """The parser of the lab's flags: ``trio-batcher bench`` and ``python -m trio_batcher_bench``."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description=(
            "Start the simulated upstream and the proxy as separate processes on loopback, "
            "drive load, reconcile what the clients saw with the proxy's /metrics, and write "
            "a JSON and a markdown report. Exits 1 if any scenario's checks fail."
        ),
    )
    _add_arguments(parser)
    return parser


def _command(args: argparse.Namespace) -> str:
    parts = ["trio-batcher", "bench", "--scenario", args.scenario]
    if args.quick:
        parts.append("--quick")
    for flag, value in (
        ("--duration", args.duration),
        ("--concurrency", args.concurrency),
        ("--warmup", args.warmup),
        ("--minutes", args.minutes),
    ):
        if value is not None:
            parts += [flag, f"{value:g}" if isinstance(value, float) else str(value)]
    if args.litellm:
        parts += ["--litellm", args.litellm]
    if args.storm_retry_after != "both":
        parts += ["--storm-retry-after", args.storm_retry_after]
    if args.out != DEFAULT_OUT:
        parts += ["--out", args.out]
    return shlex.join(parts)


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _git_commit() -> str | None:
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            cwd=Path(__file__).resolve().parent,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None


def _loadavg() -> list[float] | None:
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except OSError:
        return None


def _machine() -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "versions": {
            name: _version(name)
            for name in ("trio", "hypercorn", "quart-trio", "httpx2", "httpcore2")
        },
        "git_commit": _git_commit(),
        "loadavg_before": _loadavg(),
    }


class _Stopped(Exception):
    """A signal stopped the run; the servers have been stopped. ``status`` is the exit code."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.status = 128 + signum


async def _run_all(names: list[str], options: Options, display: Display) -> list[ScenarioResult]:
    """Run the scenarios. SIGINT, SIGTERM and SIGHUP cancel the run cleanly -- every server
    process is stopped on the way out -- instead of interrupting it wherever it happens to be.

    Raises:
      _Stopped: after one of those signals.
    """
    stopped: int | None = None
    results: list[ScenarioResult] = []

    async def watch_signals(scope: trio.CancelScope) -> None:
        nonlocal stopped
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as signals:
            async for signum in signals:
                stopped = signum
                scope.cancel()
                return

    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch_signals, nursery.cancel_scope)
        results = await _run_scenarios(names, options, display)
        nursery.cancel_scope.cancel()
    if stopped is not None:
        raise _Stopped(stopped)
    return results


async def _run_scenarios(
    names: list[str], options: Options, display: Display
) -> list[ScenarioResult]:
    bench = Bench(options, display)
    results = []
    for name in names:
        scenario = SCENARIOS[name]
        result = ScenarioResult(scenario.name, scenario.title, scenario.description, {})
        display.scenario(scenario.name, scenario.title)
        started = trio.current_time()
        try:
            await scenario.run(bench, result)
        except Exception as exc:  # a broken scenario is reported; the others still run
            result.error = f"{type(exc).__name__}: {exc}"
            display.line("".join(traceback.format_exception(exc)))
        result.duration_s = round(trio.current_time() - started, 3)
        failed = [c.name for c in result.checks if not c.ok]
        verdict = "ok" if result.ok else "FAILED"
        display.line(
            f"[{name}] {verdict} in {result.duration_s:.1f} s; "
            f"checks {len(result.checks) - len(failed)}/{len(result.checks)}"
            + "".join(f"\n  failed: {f}" for f in failed)
        )
        results.append(result)
    return results


def run_bench(args: argparse.Namespace) -> int:
    """Run the scenarios ``args`` selects and write the reports; returns the exit status."""
    chosen = args.scenario.split(",")
    names = [n for n, s in SCENARIOS.items() if n in chosen or ("all" in chosen and s.in_all)]
    out = Path(args.out)
    options = Options(
        quick=args.quick,
        duration=args.duration,
        concurrency=args.concurrency,
        warmup=args.warmup,
        minutes=args.minutes,
        log_dir=Path(args.logs) if args.logs else out.parent / "logs",
        profile_dir=Path(args.profile) if args.profile else None,
        litellm=Path(args.litellm) if args.litellm else None,
        storm_retry_after=args.storm_retry_after,
    )
    machine = _machine()
    created = datetime.now(UTC).isoformat(timespec="seconds")
    display = Display(rich=False if args.no_progress else None)
    started = time.monotonic()
    try:
        scenarios = trio.run(_run_all, names, options, display)
    except KeyboardInterrupt:  # before the signal watcher was installed
        print("trio-batcher bench: interrupted; no report", file=sys.stderr)
        return 130
    except _Stopped as stop:
        display.close()
        print(f"trio-batcher bench: {stop}; servers stopped, no report", file=sys.stderr)
        return stop.status
    finally:
        display.close()
    machine["loadavg_after"] = _loadavg()
    report = Report(
        created_at=created,
        command=_command(args),
        quick=args.quick,
        machine=machine,
        scenarios=scenarios,
        duration_s=time.monotonic() - started,
    )
    extra = [Path(args.visuals_json)] if args.visuals_json else []
    # The pages load data/results.js when opened from the file system: same content.
    scripts = [(path.with_suffix(".js"), VISUALS_GLOBAL) for path in extra]
    markdown = write_report(report, out, *extra, scripts=scripts)
    written = [*extra, *(path for path, _ in scripts)]
    print(
        f"trio-batcher bench: {'PASS' if report.ok else 'FAIL'} in {report.duration_s:.0f} s; "
        f"wrote {out}, {markdown}" + "".join(f", {p}" for p in written),
        file=sys.stderr,
    )
    return 0 if report.ok else 1
