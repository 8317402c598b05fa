"""Turn a bench report into the data files the pages in ``visuals/`` read.

Every page works from the file system (``file://``), where Chromium blocks ``fetch()``, so
each data set exists twice with the same content: ``data/<name>.json`` (fetched when the
proxy serves the pages) and ``data/<name>.js``, a classic script that sets a global
(``window.BENCH_RESULTS = {...};``) and is loaded with a ``<script>`` element.

    python visuals/build_data.py                           # from visuals/data/results.json
    python visuals/build_data.py bench-results/latest.json # copy that report in first
    python visuals/build_data.py --soak bench-results/soak.json  # only its soak, for results.html
    python visuals/build_data.py --tenants bench-results/tenants.json  # only its tenants scenario
    python visuals/build_data.py --peers bench-results/peers.json  # only its peers scenario

Writes:

- ``results.json`` / ``results.js`` (``BENCH_RESULTS``): the whole report, for results.html;
- ``burst-trace.json`` / ``.js`` (``BURST_TRACE``): the ``burst`` scenario's recorded traces,
  for batching.html -- only when the report ran ``burst``, so a report of other scenarios
  leaves the last recorded trace in place;
- ``overload.json`` / ``.js`` (``OVERLOAD``): the ``overload`` scenario, for
  backpressure.html -- likewise only when the report ran it;
- ``soak.json`` / ``.js`` (``BENCH_SOAK``): the ``soak`` scenario whole (its RSS series
  included), which results.html shows when the report it reads has no soak of its own
  (``--scenario all`` does not run it) -- likewise only when the report ran it. With
  ``--soak REPORT`` only this pair is written, and ``results.json`` is left as it is;
- ``tenants.json`` / ``.js`` (``BENCH_TENANTS``): the ``tenants`` scenario whole, which
  results.html likewise shows when its report has none (a report from before the scenario
  existed, or of other scenarios) -- only when the report ran it; ``--tenants REPORT``
  writes only this pair;
- ``peers.json`` / ``.js`` (``BENCH_PEERS``): the ``peers`` scenario whole (trio-batcher
  beside LiteLLM under the same loads), shown the same way; ``--peers REPORT`` writes only
  this pair.

Nothing is derived or smoothed here: the files hold the report's own numbers, cut down to
what each page shows, plus where they came from (``source``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Final

HERE: Final = Path(__file__).resolve().parent
DATA: Final = HERE / "data"
SCHEMA: Final = "trio-batcher-bench/1"

__all__ = ["build", "build_peers", "build_soak", "build_tenants", "js_module", "write_pair"]


def js_module(global_name: str, document: Any) -> str:
    """The ``data/*.js`` form of ``document``: one statement setting ``window[global_name]``.

    JSON is valid JavaScript, so the page sees exactly the JSON twin's values.
    """
    body = json.dumps(document, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return f"window.{global_name} = {body};\n"


def write_pair(name: str, global_name: str, document: Any, data_dir: Path = DATA) -> None:
    """Write ``<name>.json`` and ``<name>.js`` with the same content."""
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / f"{name}.json").write_text(json.dumps(document, indent=1, allow_nan=False) + "\n")
    (data_dir / f"{name}.js").write_text(js_module(global_name, document))


def _source(report: dict[str, Any]) -> dict[str, Any]:
    machine = report.get("machine", {})
    return {
        "created_at": report.get("created_at"),
        "command": report.get("command"),
        "quick": report.get("quick"),
        "git_commit": machine.get("git_commit"),
        "cpus": machine.get("cpus"),
        "loadavg_before": machine.get("loadavg_before"),
        "loadavg_after": machine.get("loadavg_after"),
    }


def _burst(report: dict[str, Any], scenario: dict[str, Any]) -> dict[str, Any]:
    phases = {
        p["name"]: {
            "counts": p["counts"],
            "latency_ms": p["latency_ms"],
            "upstream": p["upstream"],
            "cpu": p["cpu"],
            "proxy_timing_ms": p["proxy_timing_ms"],
        }
        for p in scenario["phases"]
    }
    return {
        "source": _source(report),
        "ok": scenario["ok"],
        "config": scenario["config"],
        "summary": scenario["summary"],
        "targets": scenario["targets"],
        "checks": scenario["checks"],
        "notes": scenario["notes"],
        "phases": phases,
        "traces": scenario["traces"],
    }


def _overload(report: dict[str, Any], scenario: dict[str, Any]) -> dict[str, Any]:
    keep = (
        "name",
        "rate_per_s",
        "wall_s",
        "counts",
        "rates",
        "latency_ms",
        "send_lag_ms",
        "proxy_timing_ms",
        "upstream",
        "cpu",
        "timeline",
    )
    return {
        "source": _source(report),
        "ok": scenario["ok"],
        "title": scenario["title"],
        "description": scenario["description"],
        "config": scenario["config"],
        "summary": scenario["summary"],
        "targets": scenario["targets"],
        "checks": scenario["checks"],
        "notes": scenario["notes"],
        "phases": [{k: p[k] for k in keep} for p in scenario["phases"]],
    }


def _one_scenario(report: dict[str, Any], scenario: dict[str, Any]) -> dict[str, Any]:
    """A scenario whole, with where it came from: what results.html shows when its own
    report has no such scenario."""
    return {"schema": SCHEMA, "source": _source(report), "scenario": scenario}


def _read(report_path: Path) -> dict[str, Any]:
    report = json.loads(report_path.read_text())
    if not isinstance(report, dict) or report.get("schema") != SCHEMA:
        raise ValueError(f"{report_path}: not a {SCHEMA} report")
    return report


def build_soak(report_path: Path, data_dir: Path = DATA) -> list[str]:
    """Write only ``soak.json`` / ``.js`` from the report at ``report_path``.

    Raises:
      ValueError: not a bench report, or one without a soak scenario.
    """
    report = _read(report_path)
    soak = report.get("scenarios", {}).get("soak")
    if not soak:
        raise ValueError(f"{report_path}: the report has no soak scenario")
    write_pair("soak", "BENCH_SOAK", _one_scenario(report, soak), data_dir)
    return ["soak"]


def _build_only(name: str, global_name: str, report_path: Path, data_dir: Path) -> list[str]:
    report = _read(report_path)
    scenario = report.get("scenarios", {}).get(name)
    if not scenario:
        raise ValueError(f"{report_path}: the report has no {name} scenario")
    write_pair(name, global_name, _one_scenario(report, scenario), data_dir)
    return [name]


def build_tenants(report_path: Path, data_dir: Path = DATA) -> list[str]:
    """Write only ``tenants.json`` / ``.js`` from the report at ``report_path``.

    Raises:
      ValueError: not a bench report, or one without a tenants scenario.
    """
    return _build_only("tenants", "BENCH_TENANTS", report_path, data_dir)


def build_peers(report_path: Path, data_dir: Path = DATA) -> list[str]:
    """Write only ``peers.json`` / ``.js`` from the report at ``report_path``.

    Raises:
      ValueError: not a bench report, or one without a peers scenario.
    """
    return _build_only("peers", "BENCH_PEERS", report_path, data_dir)


def build(report_path: Path, data_dir: Path = DATA) -> list[str]:
    """Write the pages' data files from the report at ``report_path``; returns their names.

    Raises:
      ValueError: the file is not a bench report of the schema this script knows.
    """
    report = _read(report_path)
    written = ["results"]
    write_pair("results", "BENCH_RESULTS", report, data_dir)
    scenarios = report.get("scenarios", {})
    burst = scenarios.get("burst")
    if burst and burst.get("traces", {}).get("batched") and not burst.get("error"):
        write_pair("burst-trace", "BURST_TRACE", _burst(report, burst), data_dir)
        written.append("burst-trace")
    overload = scenarios.get("overload")
    if overload and overload.get("phases") and not overload.get("error"):
        write_pair("overload", "OVERLOAD", _overload(report, overload), data_dir)
        written.append("overload")
    soak = scenarios.get("soak")
    if soak and soak.get("traces", {}).get("rss") and not soak.get("error"):
        write_pair("soak", "BENCH_SOAK", _one_scenario(report, soak), data_dir)
        written.append("soak")
    tenants = scenarios.get("tenants")
    if tenants and tenants.get("phases") and not tenants.get("error"):
        write_pair("tenants", "BENCH_TENANTS", _one_scenario(report, tenants), data_dir)
        written.append("tenants")
    peers = scenarios.get("peers")
    if peers and peers.get("summary", {}).get("table") and not peers.get("error"):
        write_pair("peers", "BENCH_PEERS", _one_scenario(report, peers), data_dir)
        written.append("peers")
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "report",
        nargs="?",
        type=Path,
        default=DATA / "results.json",
        help="a bench report (default: visuals/data/results.json)",
    )
    parser.add_argument(
        "--soak",
        type=Path,
        default=None,
        metavar="REPORT",
        help="write only data/soak.json/.js from this report's soak scenario",
    )
    parser.add_argument(
        "--tenants",
        type=Path,
        default=None,
        metavar="REPORT",
        help="write only data/tenants.json/.js from this report's tenants scenario",
    )
    parser.add_argument(
        "--peers",
        type=Path,
        default=None,
        metavar="REPORT",
        help="write only data/peers.json/.js from this report's peers scenario",
    )
    parser.add_argument("--data-dir", type=Path, default=DATA, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        if args.soak is not None:
            written = build_soak(args.soak, args.data_dir)
        elif args.tenants is not None:
            written = build_tenants(args.tenants, args.data_dir)
        elif args.peers is not None:
            written = build_peers(args.peers, args.data_dir)
        else:
            written = build(args.report, args.data_dir)
    except (OSError, ValueError) as exc:
        print(f"build_data: error: {exc}", file=sys.stderr)
        return 2
    names = ", ".join(f"{n}.json/.js" for n in written)
    print(f"build_data: wrote {names} in {args.data_dir}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
