"""The ``mixed`` scenario (issue 31's bench): its arithmetic and verdicts as data."""

from __future__ import annotations

from typing import Any

from trio_batcher_bench.load import Outcome
from trio_batcher_bench.mixed import (
    background_summary,
    flex_delta,
    interactive_summary,
    lanes_delta,
    saved_usd,
    side_by_side,
    variant_row,
    verdicts,
)
from trio_batcher_bench.scenarios import SCENARIOS


def _ok(latency: float) -> Outcome:
    return Outcome(0.0, 0.0, latency, 200, "ok")


def test_the_interactive_summary_is_over_successes_with_failures_by_status_and_code() -> None:
    outcomes = [_ok(0.1 * i) for i in range(1, 101)]
    outcomes.append(Outcome(0.0, 0.0, 0.01, 429, "shed", "queue_full"))
    outcomes.append(Outcome(0.0, 0.0, 5.0, 0, "error"))
    summary = interactive_summary(outcomes)
    assert summary["requests"] == 102 and summary["ok"] == 100
    assert summary["failures"] == {"0": 1, "429 queue_full": 1}
    assert summary["p50_ms"] == 5100.0  # nearest rank 50 of 100 ms .. 10 s (49.5 rounds even)
    assert summary["p99_ms"] == 9900.0 and summary["max_ms"] == 10000.0


def test_background_requests_are_accepted_refused_finished_or_left_unfinished() -> None:
    posted = [(200, "resp_1"), (200, "resp_2"), (200, "resp_3"), (400, None), (0, None)]
    final = {"resp_1": "completed", "resp_2": "failed", "resp_3": "in_progress"}
    summary = background_summary(posted, final)
    assert summary == {
        "sent": 5,
        "accepted": 3,
        "refused": {"0": 1, "400": 1},
        "by_status": {"completed": 1, "failed": 1, "in_progress": 1},
        "completed": 1,
        "finished": 2,
        "unfinished": 1,  # what starvation would look like
    }
    # A gateway without background responses refuses them all: nothing to drain.
    refused = background_summary([(400, None)] * 4, {})
    assert refused["accepted"] == 0 and refused["refused"] == {"400": 4}
    assert refused["unfinished"] == 0


def test_the_flex_block_is_read_as_deltas_and_its_saving_is_its_cost_saved() -> None:
    before = {"flex": {"requests": 4, "cost": {"batch_usd": 0.5, "saved_usd": 0.5}}}
    after = {
        "flex": {
            "requests": 10,
            "pending": 1,
            "cost": {"batch_usd": 1.25, "realtime_usd": 2.5, "saved_usd": 1.25},
            "enabled": True,
            "window": "size",
        }
    }
    delta = flex_delta(before, after)
    assert delta == {
        "requests": 6,
        "pending": 1,
        "cost": {"batch_usd": 0.75, "realtime_usd": 2.5, "saved_usd": 0.75},
    }
    assert saved_usd(delta) == 0.75
    assert saved_usd({"requests": 3, "saved_usd": 0.2}) is None  # only cost.saved_usd counts
    assert saved_usd({"requests": 3}) is None
    # No flex block (a gateway before flex): nothing to read, and no saving claimed.
    assert flex_delta({}, {"requests": {"total": 3}}) is None
    assert saved_usd(None) is None


def test_the_lanes_block_gives_each_lanes_admissions_and_its_recent_wait() -> None:
    before = {"lanes": {"interactive": {"admitted": 10, "shed": 0}, "deferrable": {"admitted": 2}}}
    after = {
        "lanes": {
            "interactive": {"admitted": 130, "shed": 1, "queue_wait_ms": {"p95": 12.5}},
            "deferrable": {"admitted": 152, "shed": 0, "queue_wait_ms": {"p95": 2400.0}},
        }
    }
    assert lanes_delta(before, after) == {
        "interactive": {"admitted": 120, "shed": 1, "queue_wait_p95_ms": 12.5},
        "deferrable": {"admitted": 150, "shed": 0, "queue_wait_p95_ms": 2400.0},
    }
    assert lanes_delta({}, {"requests": {}}) is None


def _variant(p99: float | None, accepted: int, unfinished: int = 0, admitted: int = 0) -> Any:
    interactive = {"requests": 100, "ok": 100, "failures": {}, "p50_ms": 110.0, "p99_ms": p99}
    background = {"sent": 150, "accepted": accepted, "refused": {}, "unfinished": unfinished}
    flex = {"requests": 15, "failures": {}, "p50_ms": 900.0, "saved_usd": 0.01}
    lanes = {"deferrable": {"admitted": admitted, "queue_wait_p95_ms": 2000.0}}
    alone = {"p50_ms": 100.0, "p99_ms": 120.0}
    return variant_row(interactive, alone, background, flex, lanes)


def test_the_side_by_side_table_compares_each_variant_with_the_interactive_baseline() -> None:
    alone = {"requests": 120, "failures": {}, "p50_ms": 100.0, "p99_ms": 120.0}
    on, off = _variant(150.0, 150), _variant(2400.0, 150)
    assert on["interactive"]["p99_vs_alone"] == 1.25
    assert off["interactive"]["p99_vs_alone"] == 20.0
    table = side_by_side(alone, on, off)
    assert table["columns"] == ["", "interactive alone", "lanes ON", "lanes OFF"]
    rows = {row[0]: row[1:] for row in table["rows"]}
    assert rows["interactive p99 (ms)"] == [120.0, 150.0, 2400.0]
    assert rows["background accepted"] == [None, 150, 150]
    assert rows["flex saved (USD, /metrics)"] == [None, 0.01, 0.01]


def test_with_deferrable_load_the_lanes_must_beat_no_lanes_and_starve_nothing() -> None:
    checks, notes = verdicts(_variant(150.0, 150), _variant(2400.0, 150))
    assert notes == [] and all(check.ok for check in checks) and len(checks) == 4
    checks, _ = verdicts(_variant(2500.0, 150), _variant(2400.0, 150))
    assert [c.name for c in checks if not c.ok] == ["lanes on: interactive p99 below lanes off"]
    checks, _ = verdicts(_variant(150.0, 150, unfinished=3), _variant(2400.0, 150))
    failed = [c.name for c in checks if not c.ok]
    assert failed == ["lanes on: every accepted background response finished (no starvation)"]


def test_without_deferrable_load_it_says_so_instead_of_checking_a_difference() -> None:
    # The gateway refused every background request and nothing was deferrable: the lanes had
    # nothing to act on, so only the interactive answers are checked.
    checks, notes = verdicts(_variant(130.0, 0), _variant(129.0, 0))
    assert len(checks) == 2 and all(check.ok for check in checks)
    assert len(notes) == 1 and "No deferrable request reached the gate" in notes[0]
    # Flex falling back to realtime is deferrable too: lanes admitted some, so it checks.
    checks, notes = verdicts(_variant(130.0, 0, admitted=5), _variant(400.0, 0))
    assert notes == [] and len(checks) == 4


def test_the_mixed_scenario_is_registered_and_runs_with_the_suite() -> None:
    scenario = SCENARIOS["mixed"]
    assert scenario.in_all
    assert "LANES_ENABLED" in scenario.description and "background" in scenario.description
