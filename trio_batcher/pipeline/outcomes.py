"""How a request ended, written down: where its time went, and the observatory's counters.

The pipeline records most requests itself; a stream ends later, in its relay, which gets
this small recorder rather than the whole pipeline, so the relay depends on what it
records with and nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, final

import trio

from ..admission.lanes import LanePolicy
from ..observatory.metrics import MetricsRegistry, Timing
from ..upstream.request import UpstreamRequest

__all__ = ["Outcomes", "request_timing"]


def request_timing(
    arrived: float,
    dispatched: float | None,
    started_at: float | None = None,
    first_byte_at: float | None = None,
    finished_at: float | None = None,
    first_token_at: float | None = None,
) -> Timing:
    """Where the time went, as of now. ``upstream`` runs from the end of the queue (the
    first attempt's start) to the last byte, so failed attempts, retries and the waits the
    upstream asked for between them are the upstream's time, not the proxy's overhead;
    ``upstream_ttfb`` is the answering attempt's own."""
    now = trio.current_time()
    begun = dispatched if dispatched is not None else started_at
    return Timing(
        total=now - arrived,
        queue=max(0.0, (now if dispatched is None else dispatched) - arrived),
        upstream_ttfb=None
        if started_at is None or first_byte_at is None
        else first_byte_at - started_at,
        ttft=None if first_token_at is None else first_token_at - arrived,
        upstream=None if begun is None else (finished_at or now) - begun,
    )


@final
class Outcomes:
    """Records finished requests in the metrics registry (nothing, without one); with
    ``lanes``, each one's queue wait under the priority lane it queued in."""

    def __init__(self, metrics: MetricsRegistry | None, lanes: LanePolicy | None = None) -> None:
        self.metrics = metrics
        self._lanes = lanes

    def success(
        self,
        request: UpstreamRequest,
        usage: Mapping[str, Any],
        timing: Timing,
        *,
        upstream: str | None = None,
    ) -> None:
        """``upstream``: the one that answered, counted under it and priced at its prices."""
        if request.notes is not None:
            _done(request, 200, timing, upstream)
        if self.metrics is not None:
            self._lane_wait(self.metrics, request, timing)
            self.metrics.record_success(
                request.model,
                usage,
                timing,
                stream=request.stream,
                surface=request.surface,
                tenant=request.tenant,
                upstream=upstream,
            )

    def error(
        self,
        request: UpstreamRequest,
        status: int,
        timing: Timing,
        usage: Mapping[str, Any] | None = None,
        *,
        upstream: str | None = None,
    ) -> None:
        """``upstream``: the last one tried; None when the request was never routed."""
        if request.notes is not None:
            _done(request, status, timing, upstream)
        if self.metrics is not None:
            self._lane_wait(self.metrics, request, timing)
            self.metrics.record_error(
                request.model,
                status,
                timing,
                stream=request.stream,
                usage=usage,
                surface=request.surface,
                tenant=request.tenant,
                upstream=upstream,
            )

    def logged(
        self, request: UpstreamRequest, status: int, timing: Timing, upstream: str | None
    ) -> None:
        """Only the request's DEBUG line, for a call counted elsewhere (``count_tokens``,
        counted under its surface alone)."""
        if request.notes is not None:
            _done(request, status, timing, upstream)

    def _lane_wait(
        self, metrics: MetricsRegistry, request: UpstreamRequest, timing: Timing
    ) -> None:
        if self._lanes is not None:
            metrics.record_lane_wait(self._lanes.lane(request.deferrable), timing.queue)


def _done(request: UpstreamRequest, status: int, timing: Timing, upstream: str | None) -> None:
    """The request's DEBUG line (``logs.decisions``): it has notes only while DEBUG is on."""
    assert request.notes is not None
    request.notes.done(
        door=request.surface,
        tenant=request.tenant,
        model=request.model,
        stream=request.stream,
        status=status,
        upstream=upstream,
        arrived_to_now=timing.total,
        queue=timing.queue,
        upstream_time=timing.upstream,
        ttft=timing.ttft,
    )
