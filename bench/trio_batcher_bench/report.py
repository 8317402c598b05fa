"""Writing a bench report: the JSON document (for pages and tools) and a markdown summary.

The JSON is the record (schema in docs/benchmarks.md); the markdown is derived from it
for people: one table of phases per scenario, then its targets and failed checks.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .results import PhaseResult, Report, ScenarioResult, Summary

__all__ = ["js_module", "render_markdown", "write_report"]


def write_report(
    report: Report,
    json_path: Path,
    *extra_json: Path,
    scripts: Sequence[tuple[Path, str]] = (),
) -> Path:
    """Write ``json_path``, its markdown twin (``.md``), copies of the JSON, and the JSON as
    classic scripts; returns the markdown path.

    Args:
      scripts: ``(path, global_name)`` pairs: each file gets ``js_module(global_name, ...)``,
        for pages opened from the file system, where ``fetch()`` of a JSON file is blocked.
    """
    data = report.to_json()
    document = json.dumps(data, indent=1, allow_nan=False) + "\n"
    for path in (json_path, *extra_json):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(document)
    for path, global_name in scripts:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(js_module(global_name, data))
    markdown = json_path.with_suffix(".md")
    markdown.write_text(render_markdown(report))
    return markdown


def js_module(global_name: str, document: Any) -> str:
    """``document`` as one statement setting ``window[global_name]``: the same text as
    ``visuals/build_data.py`` writes, so the pages read a bench run's output directly."""
    body = json.dumps(document, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return f"window.{global_name} = {body};\n"


def _num(value: float | None, digits: int = 1) -> str:
    if value is None:
        return "–"
    return f"{value:,.{digits}f}"


def _load(phase: PhaseResult) -> str:
    if phase.mode == "closed":
        return f"closed ×{phase.concurrency}"
    return f"open {phase.rate_per_s:g}/s"


def _p(summary: Summary | None, key: str) -> str:
    if summary is None:
        return "–"
    value: float | None = getattr(summary, key)
    return _num(value)


def _cpu(phase: PhaseResult) -> str:
    cpu = phase.cpu
    parts = [_num(cpu.proxy_util, 2), _num(cpu.simulator_util, 2), _num(cpu.client_util, 2)]
    return " / ".join(parts) + f" ({_num(cpu.other_util, 2)})"


def _cpu_per_request(phase: PhaseResult) -> str:
    cpu = phase.cpu
    parts = [cpu.proxy_ms_per_request, cpu.simulator_ms_per_request, cpu.client_ms_per_request]
    return " / ".join(_num(v, 2) for v in parts)


def _phase_table(scenario: ScenarioResult) -> list[str]:
    streams = any(p.stream for p in scenario.phases)
    head = ["phase", "via", "load", "offered/s", "goodput/s", "shed/s", "p50", "p95", "p99"]
    head += ["max"]
    if streams:
        head += ["TTFT p50", "TTFT p99", "ITL p50", "ITL p99"]
    head += [
        "upstream max in-flight",
        "CPU ms/req proxy / sim / client",
        "cores proxy / sim / client (other)",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for p in scenario.phases:
        row = [
            p.name,
            p.via,
            _load(p),
            _num(p.rates.offered),
            _num(p.rates.goodput),
            _num(p.rates.shed),
            _p(p.latency_ms, "p50"),
            _p(p.latency_ms, "p95"),
            _p(p.latency_ms, "p99"),
            _p(p.latency_ms, "max"),
        ]
        if streams:
            row += [_p(p.ttft_ms, "p50"), _p(p.ttft_ms, "p99")]
            row += [_p(p.itl_ms, "p50"), _p(p.itl_ms, "p99")]
        row += [str(p.upstream.max_in_flight), _cpu_per_request(p), _cpu(p)]
        lines.append("| " + " | ".join(row) + " |")
    return lines


def _is_table(value: object) -> bool:
    return isinstance(value, dict) and set(value) == {"columns", "rows"}


def _cell(value: object) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}: {v}" for k, v in value.items()) or "none"
    if isinstance(value, float):
        return f"{value:,.4g}" if abs(value) < 10 else f"{value:,.1f}"
    return "–" if value is None else str(value)


def _table_lines(table: dict[str, Any]) -> list[str]:
    """A summary's ``{"columns", "rows"}`` value as a markdown table."""
    columns = [str(c) for c in table["columns"]]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in table["rows"]]
    return lines


def _summary_lines(summary: dict[str, Any], indent: str = "") -> list[str]:
    lines = []
    for key, value in summary.items():
        if _is_table(value):
            lines += [f"{indent}- {key}:", "", *_table_lines(value), ""]
        elif isinstance(value, dict) and value:
            lines.append(f"{indent}- {key}:")
            lines += _summary_lines(value, indent + "  ")
        elif isinstance(value, dict | list):
            lines.append(f"{indent}- {key}: {json.dumps(value)}")
        else:
            lines.append(f"{indent}- {key}: {value}")
    return lines


def render_markdown(report: Report) -> str:
    machine = report.machine
    out = [
        f"# trio-batcher bench: {'PASS' if report.ok else 'FAIL'}",
        "",
        f"- command: `{report.command}`",
        f"- created: {report.created_at}, took {report.duration_s:.0f} s",
        f"- machine: {machine.get('cpus')} CPUs, Python {machine.get('python')}, "
        f"load average before {machine.get('loadavg_before')} / after "
        f"{machine.get('loadavg_after')}",
        "",
        "Latencies in ms from the intended send time; CPU in cores (1.0 = one core busy), "
        "`other` = everything else on the machine during the phase.",
    ]
    for scenario in report.scenarios:
        status = "ok" if scenario.ok else "FAILED"
        out += ["", f"## {scenario.name}: {scenario.title} ({status})", "", scenario.description]
        if scenario.error:
            out += ["", f"**Error:** `{scenario.error}`"]
        if scenario.phases:
            out += ["", *_phase_table(scenario)]
        if scenario.targets:
            out += ["", "Targets:", ""]
            for t in scenario.targets:
                mark = {True: "met", False: "MISSED", None: "n/a"}[t.met]
                out.append(
                    f"- **{mark}**: {t.name}: {_num(t.actual, 2)} {t.unit} (target {t.target})"
                )
        failed = [c for c in scenario.checks if not c.ok]
        out += ["", f"Checks: {len(scenario.checks) - len(failed)}/{len(scenario.checks)} passed."]
        for c in failed:
            out.append(f"- **FAILED** {c.name}: expected {c.expected}, got {c.actual}. {c.detail}")
        if scenario.summary:
            out += ["", "Summary:", "", *_summary_lines(scenario.summary)]
        for note in scenario.notes:
            out += ["", f"Note: {note}"]
    return "\n".join(out) + "\n"
