"""The soak's checks: the books against ``/metrics`` and the simulator, and the end state.

Pure (no I/O, no clock), tested as data. ``reconcile`` compares a ``soak_ledger.Ledger``
with the deltas of the proxy's ``/metrics`` over the run, door by door (``by_surface``:
``openai.chat``, ``openai.responses``, ``anthropic.messages``); ``upstream_checks`` the
proxy's upstream counters with the simulator's; ``store_check`` the Responses the proxy
stored with those that asked to be; ``end_checks`` the state both are left in.

How the proxy counts (and therefore what must match):

- A request it took on is counted once in ``requests`` with the status it recorded: 200,
  499 for a client that left (before its body was complete, queued, in flight or
  mid-stream), or the error's status, in the gateway's own terms (``soak_ledger``).
- A request its gate shed is counted in ``rejected.by_reason`` (``queue_full``,
  ``queue_timeout``, ``shutdown``) and nowhere else.
- ``upstream_cooldown`` is ambiguous from outside: shed before admission (``rejected``) or
  raised before an attempt inside the call (``requests``, 429 or 503). The checks that
  involve it say so, and hold exactly when there were none.

Two kinds of leaving are ambiguous by nature, and only they get any slack, bounded by how
many of them there were, with what actually happened reported (``ambiguity``):

- a connection **reset** mid-body: the kernel discards bytes the server had not read yet,
  so if the proxy had not read the request head by then, it never saw the request at all
  (``uncounted``, at most the resets);
- a client that left **in flight** may cross an answer the proxy had decided but not yet
  sent -- under CPU starvation the proxy can be that far behind -- and then the proxy
  counts that answer (a shed, an error) instead of a 499 (``crossed``, at most the in-flight
  leaves). Every crossed leave must show up exactly once as an excess elsewhere.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any, Final

from .results import Check
from .soak_ledger import COOLDOWN, GATE_REASONS, LEFT, SURFACES, Ledger

__all__ = [
    "ambiguity",
    "end_checks",
    "reason_delta",
    "reconcile",
    "status_delta",
    "store_check",
    "upstream_checks",
    "upstream_delta",
]


def _delta(before: Mapping[str, Any], after: Mapping[str, Any], *path: str) -> int:
    def get(doc: Mapping[str, Any]) -> int:
        node: Any = doc
        for key in path:
            node = node.get(key, {}) if isinstance(node, Mapping) else {}
        return int(node) if isinstance(node, int) else 0

    return get(after) - get(before)


AMBIGUOUS: Final = ("reset_mid_body", "in_flight")


def ambiguity(
    ledger: Ledger, before: Mapping[str, Any], after: Mapping[str, Any]
) -> dict[str, int]:
    """How many resets the proxy never saw (``uncounted``) and how many in-flight leaves
    it counted as an answer instead (``crossed``), from the deltas (see the docstring)."""
    counted = _delta(before, after, "requests", "total") + _delta(
        before, after, "rejected", "total"
    )
    uncounted = ledger.sent - ledger.kinds["failed"] - counted
    left = _delta(before, after, "requests", "by_status", str(LEFT))
    return {
        "resets": ledger.left["reset_mid_body"],
        "uncounted": uncounted,
        "in_flight_leaves": ledger.left["in_flight"],
        "crossed": ledger.kinds["left"] - uncounted - left,
    }


def reconcile(ledger: Ledger, before: Mapping[str, Any], after: Mapping[str, Any]) -> list[Check]:
    """The ledger against the proxy's ``/metrics`` deltas (see the module docstring)."""
    checks: list[Check] = []

    def check(name: str, ok: bool, expected: Any, actual: Any, detail: str = "") -> None:
        checks.append(Check(f"soak: {name}", ok, expected, actual, detail))

    def span(low: int, high: int) -> int | str:
        return low if low == high else f"{low}..{high}"

    accounted = sum(ledger.kinds.values())
    unsent = ledger.unsent_late + ledger.unsent_bound
    check(
        "every arrival was sent and followed to its end, or counted unsent",
        ledger.offered == ledger.sent + unsent,
        ledger.offered,
        ledger.sent + unsent,
        f"{ledger.sent} sent and ended, {unsent} unsent (the driver was behind or at its bound)",
    )
    check(
        "every request sent has exactly one outcome, none a client failure",
        accounted == ledger.sent and ledger.kinds["failed"] == 0,
        f"{ledger.sent} accounted, 0 failed",
        f"{accounted} accounted, {ledger.kinds['failed']} failed",
        "; ".join(ledger.failure_examples[:5]),
    )
    took_on = _delta(before, after, "requests", "total")
    rejected = _delta(before, after, "rejected", "total")
    amb = ambiguity(ledger, before, after)
    resets, crossable = amb["resets"], amb["in_flight_leaves"]
    crossed = max(0, amb["crossed"])
    sent = ledger.sent - ledger.kinds["failed"]
    check(
        "the proxy counted every request once (requests.total + rejected.total)",
        sent - resets <= took_on + rejected <= sent,
        span(sent - resets, sent),
        took_on + rejected,
        f"requests.total delta {took_on} + rejected.total delta {rejected}; less only resets "
        f"it never read ({amb['uncounted']} of {resets})",
    )
    check(
        "clients that left, less resets never read, = 499s + the answers they crossed",
        0 <= amb["crossed"] <= crossable,
        f"0..{crossable} crossed (in-flight leaves)",
        amb["crossed"],
        "clients that left - resets the proxy never saw - requests.by_status[499]",
    )
    check(
        "requests.success = answers the clients read whole",
        _delta(before, after, "requests", "success") == ledger.kinds["ok"],
        ledger.kinds["ok"],
        _delta(before, after, "requests", "success"),
    )
    excess = 0
    for reason in sorted(set(GATE_REASONS) | set(ledger.shed)):
        got = _delta(before, after, "rejected", "by_reason", reason)
        if got or ledger.shed[reason]:
            excess += got - ledger.shed[reason]
            check(
                f'rejected.by_reason["{reason}"] = clients shed with that reason',
                ledger.shed[reason] <= got <= ledger.shed[reason] + crossed,
                span(ledger.shed[reason], ledger.shed[reason] + crossed),
                got,
                "(plus in-flight leaves that crossed such a shed)" if crossed else "",
            )
    cooled = sum(ledger.cooldown_statuses.values())
    shed_cooling = _delta(before, after, "rejected", "by_reason", COOLDOWN)
    check(
        f'rejected.by_reason["{COOLDOWN}"] <= clients answered {COOLDOWN}',
        shed_cooling <= cooled + crossed,
        f"<= {cooled + crossed}",
        shed_cooling,
        "the rest were raised inside the call and counted in requests (429/503)",
    )
    statuses = set(ledger.statuses) | set(ledger.cooldown_statuses)
    statuses |= {int(s) for s in after["requests"]["by_status"]}
    left = ledger.kinds["left"]
    for status in sorted(statuses - {429, 503}):
        got = _delta(before, after, "requests", "by_status", str(status))
        if status == LEFT:
            low, high = left - resets - crossable, left
            check(
                f'requests.by_status["{LEFT}"] = clients that left',
                low <= got <= high,
                span(low, high),
                got,
                "less resets the proxy never saw and in-flight leaves that crossed an answer",
            )
            continue
        want = ledger.statuses[status]
        if status != 200:
            excess += got - want
        check(
            f'requests.by_status["{status}"] = clients answered so',
            want <= got <= want + (0 if status == 200 else crossed),
            span(want, want + (0 if status == 200 else crossed)),
            got,
        )
    pair = sum(_delta(before, after, "requests", "by_status", str(s)) for s in (429, 503))
    expected = sum(ledger.statuses[s] + ledger.cooldown_statuses[s] for s in (429, 503))
    excess += pair + shed_cooling - expected
    check(
        'requests.by_status["429"] + ["503"] + rejected upstream_cooldown = clients so',
        expected <= pair + shed_cooling <= expected + crossed,
        span(expected, expected + crossed),
        pair + shed_cooling,
        "429s and 503s (an Anthropic client's 529s) of the gateway's and the upstream's",
    )
    check(
        "every crossed in-flight leave is counted exactly once as something else",
        excess == amb["crossed"],
        amb["crossed"],
        excess,
        "the proxy's excess over the clients in every shed reason and status but 200/499",
    )
    streamed = _delta(before, after, "requests", "stream")
    slack = ledger.stream_left["reset_mid_body"] + ledger.stream_left["in_flight"]
    low = ledger.streams_taken_on - slack
    high = ledger.streams_taken_on + ledger.streams_cooldown
    check(
        "requests.stream = streaming requests the proxy took on",
        low <= streamed <= high,
        span(low, high),
        streamed,
    )
    for api, surface in SURFACES.items():
        taken = ledger.taken_on(api)
        door_left = ledger.door_left.get(api, Counter())
        slack = sum(door_left[stage] for stage in AMBIGUOUS)
        cooling = ledger.by_door.get(api, Counter())["cooldown"]
        got = _delta(before, after, "by_surface", surface, "requests", "total")
        check(
            f"by_surface[{surface}].requests.total = that door's requests taken on",
            taken - slack <= got <= taken + cooling + crossed,
            span(taken - slack, taken + cooling + crossed),
            got,
        )
        door = ledger.door_statuses.get(api, Counter())
        for status in (200, LEFT):
            got = _delta(before, after, "by_surface", surface, "requests", "by_status", str(status))
            low = door[status] - (slack if status == LEFT else 0)
            check(
                f'by_surface[{surface}].requests.by_status["{status}"] = that door\'s',
                low <= got <= door[status],
                span(low, door[status]),
                got,
            )
    return checks


def upstream_checks(
    ledger: Ledger, sim_requests: int, before: Mapping[str, Any], after: Mapping[str, Any]
) -> list[Check]:
    """The simulator against the proxy's upstream counters: every attempt the proxy made
    reached the simulator, but those cancelled on their way, and at most one first attempt per
    request it took on -- fewer by the requests that ended before any: a client that left
    (before its body was in, queued, or waiting for an upstream slot), a deadline passed
    while waiting (504), a cooldown that shed it."""
    counters = upstream_delta(before, after)
    attempted = counters.get("attempts", 0)
    # An attempt cancelled (its client left, its deadline passed) before the simulator's
    # app saw the request was counted by the proxy only.
    cancellable = ledger.kinds["left"] + ledger.statuses[504]
    attempts = Check(
        "soak: every upstream attempt the proxy counted reached the simulator",
        sim_requests <= attempted <= sim_requests + cancellable,
        f"{attempted - cancellable}..{attempted}" if cancellable else attempted,
        sim_requests,
        "proxy upstream.attempts delta, less attempts cancelled on their way (expected) vs "
        "simulator requests (actual)",
    )
    first = counters.get("attempts", 0) - counters.get("retries", 0)
    took_on = int(after["requests"]["total"]) - int(before["requests"]["total"])
    low = took_on - ledger.kinds["left"] - ledger.statuses[504]
    low -= counters.get("shed_by_cooldown", 0)
    return [
        attempts,
        Check(
            "soak: every request the proxy took on made at most one first attempt",
            low <= first <= took_on,
            f"{low}..{took_on}",
            first,
            "requests.total delta, less those that ended before any attempt (expected) vs "
            "upstream.attempts - upstream.retries (actual)",
        ),
    ]


def store_check(ledger: Ledger, stored: int) -> Check:
    """The responses the proxy stored over the run (``stored``, rows added to its store)
    against the ``store: true`` requests (``Ledger.stored_range``): none lost, none for a
    request that asked not to be stored."""
    low, high = ledger.stored_range()
    return Check(
        "soak: the Responses asked to be stored were, and no others",
        low <= stored <= high,
        low if low == high else f"{low}..{high}",
        stored,
        f"store: true requests by outcome {dict(sorted(ledger.stores.items()))}; at least one "
        "row per answer read whole, at most one more per error or mid-stream leave",
    )


def end_checks(
    after: Mapping[str, Any],
    sim_after: Mapping[str, Any],
    baseline_tasks: int | None,
    end_tasks: int | None,
    five: Mapping[str, Any],
    *,
    cap: int,
    task_slack: tuple[int, str] = (0, ""),
) -> list[Check]:
    """The upstream ``cap`` held; gauges, gate and trio tasks idle; no unexplained 5xx.

    ``task_slack``: tasks the end may hold beyond the baseline that are not requests', and
    why (the Redis client's extra connections after a Redis restart, ``soak_redis``)."""
    slack, why = task_slack
    allowed = None if baseline_tasks is None else baseline_tasks + slack
    gauges = after["concurrency"]
    idle = {k: gauges.get(k) for k in ("active", "waiting", "upstream_in_flight")}
    return [
        Check(
            "soak: the upstream cap was never exceeded (simulator's peak in flight)",
            int(sim_after["max_in_flight"]) <= cap,
            f"<= {cap} (BATCH_MAX_CONCURRENCY)",
            int(sim_after["max_in_flight"]),
        ),
        Check(
            "soak: gauges and the gate idle at the end (/metrics concurrency)",
            all(v == 0 for v in idle.values()) and int(sim_after["in_flight"]) == 0,
            {"active": 0, "waiting": 0, "upstream_in_flight": 0, "simulator_in_flight": 0},
            {**idle, "simulator_in_flight": int(sim_after["in_flight"])},
        ),
        Check(
            "soak: trio tasks back to their baseline (concurrency.trio_tasks)",
            allowed is not None and end_tasks is not None and end_tasks <= allowed,
            f"<= {baseline_tasks}" + (f" + {slack}" if slack else ""),
            end_tasks,
            "live trio tasks in the proxy with no client connected, before and after"
            + ("" if baseline_tasks is not None else "; /metrics has no concurrency.trio_tasks")
            + (f"; {why}" if slack else ""),
        ),
        Check(
            "soak: no 5xx that a fault did not cause",
            five["unexplained"] == 0,
            0,
            five["unexplained"],
            f"{five['total']} 5xx in all; unexplained: {five['unexplained_examples']}",
        ),
    ]


def status_delta(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, int]:
    old, new = before.get("by_status", {}), after.get("by_status", {})
    return {
        k: int(v) - int(old.get(k, 0))
        for k, v in sorted(new.items())
        if int(v) != int(old.get(k, 0))
    }


def reason_delta(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, int]:
    old, new = before["rejected"]["by_reason"], after["rejected"]["by_reason"]
    return {k: int(v) - int(old.get(k, 0)) for k, v in sorted(new.items())}


def upstream_delta(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, int]:
    old, new = before.get("upstream") or {}, after.get("upstream") or {}
    return {
        k: int(v) - int(old.get(k, 0))
        for k, v in new.items()
        if isinstance(v, int) and not isinstance(v, bool)
    }
