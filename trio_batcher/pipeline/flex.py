"""The pipeline's flex path: a ``service_tier: "flex"`` request answered through a batch.

A door that decoded ``service_tier: "flex"`` on a non-streaming request marks its
``UpstreamRequest`` (``service_tier="flex"``); the pipeline hands such a request here
instead of the gate and the dispatcher (``Pipeline.handle``). ``FlexPath.serve`` puts it in
the flex window (``flex_window``), waits at most ``FLEX_MAX_WAIT_S`` for its batch's
result, and answers exactly as a realtime call would have: the same codec turns the
batch's message into the client's reply (which says ``service_tier: "flex"``: the codecs
read ``usage.service_tier == "batch"``), or the batch's ``errored`` result into the very
error the realtime call would have given.

The tenant was charged at admission like any request (rate limits, budget); a reply
settles its grant at the batch price. A wait that runs out, or a batch that cannot be
used, follows ``FLEX_ON_TIMEOUT``: ``realtime`` returns None and the pipeline sends the
request realtime at full price (its reply says ``"default"``), ``error`` answers 429
``resource_unavailable`` -- the code OpenAI tells flex clients to retry.

Cancellation: a client that leaves cancels ``serve``; the ticket leaves the window in a
``finally`` (``FlexWindow.leave``: nothing is sent if not flushed yet), the grant is
refunded and the request is counted 499.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Final, final

import trio

from ..errors import ProxyError
from ..observatory.metrics import MetricsRegistry, Timing
from ..upstream.request import UpstreamRequest, encode_body
from .contract import CLIENT_CLOSED, JSONReply, ReplyCodec
from .flex_window import FlexClosed, FlexFull, FlexResult, FlexWindow
from .outcomes import Outcomes
from .tenancy import TenantGrant

__all__ = ["FLEX", "FlexPath"]

FLEX: Final = "flex"
"""The ``service_tier`` that asks for the flex path."""

ON_TIMEOUT: Final = ("realtime", "error")


def resource_unavailable(message: str, retry_after: float = 1.0) -> ProxyError:
    """OpenAI's answer when flex capacity is not there: 429 ``resource_unavailable``,
    which OpenAI tells flex clients to retry (with backoff)."""
    return ProxyError(
        429,
        message,
        type="rate_limit_error",
        code="resource_unavailable",
        headers={"Retry-After": str(max(1, round(retry_after)))},
    )


@final
class FlexPath:
    """Serves flex requests through a ``FlexWindow`` (module doc).

    Args:
      window: the app's flex window.
      max_wait_s: ``FLEX_MAX_WAIT_S``, from the request's arrival.
      on_timeout: ``FLEX_ON_TIMEOUT``: ``"realtime"`` or ``"error"``.
      price_factor: the batch price as a fraction of the realtime one.
      upstream: the name of the upstream the batches go to (its prices, its counts).
      metrics: the registry (None: nothing counted).
    """

    def __init__(
        self,
        window: FlexWindow,
        *,
        max_wait_s: float,
        on_timeout: str,
        price_factor: Decimal,
        upstream: str | None,
        metrics: MetricsRegistry | None,
    ) -> None:
        if on_timeout not in ON_TIMEOUT:
            raise ValueError(f"on_timeout must be one of {ON_TIMEOUT}, not {on_timeout!r}")
        self.window = window
        self._max_wait_s = max_wait_s
        self._on_timeout = on_timeout
        self._factor = price_factor
        self._upstream = upstream
        self._metrics = metrics
        self._outcomes = Outcomes(metrics)

    async def serve(
        self,
        request: UpstreamRequest,
        codec: ReplyCodec,
        arrived: float,
        grant: TenantGrant | None,
    ) -> JSONReply | None:
        """The reply through a Message Batch; None: send it realtime instead
        (``FLEX_ON_TIMEOUT=realtime`` and the wait ran out or the batch was unusable).

        Raises:
          ProxyError: 429 when ``FLEX_MAX_PENDING`` requests wait already, or (policy
            ``error``) the wait ran out; 503 while shutting down; the upstream's error
            for an ``errored`` result. Not yet ``codec.error``-ed.
        """
        params = request.content if request.content is not None else encode_body(request.body)
        try:
            ticket = self.window.join(params, request.model)
        except (FlexFull, FlexClosed) as exc:
            if grant is not None:
                grant.refund()
            full = isinstance(exc, FlexFull)
            if self._metrics is not None:
                self._metrics.record_rejected(
                    "flex_full" if full else "shutdown", tenant=request.tenant
                )
            if full:
                raise resource_unavailable(
                    "Flex capacity is unavailable: too many flex requests are waiting "
                    "(FLEX_MAX_PENDING); retry later, or send the request without "
                    "service_tier flex."
                ) from None
            raise ProxyError(
                503,
                "The proxy is shutting down; retry on another instance.",
                code="shutdown",
                headers={"Retry-After": "1"},
            ) from None
        del params
        result: FlexResult | None = None
        try:
            with trio.move_on_at(arrived + self._max_wait_s):
                result = await ticket.wait()
        except trio.Cancelled:
            waited = trio.current_time() - arrived
            if grant is not None:
                grant.refund()
            self._outcomes.error(request, CLIENT_CLOSED, Timing(total=waited, queue=waited))
            raise
        finally:
            if result is None:
                self.window.leave(ticket)
        waited = trio.current_time() - arrived
        totals = self._metrics.flex if self._metrics is not None else None
        if result is None:
            if totals is not None:
                totals.timed_out(self._on_timeout, waited)
            self._unavailable(
                request,
                grant,
                waited,
                f"No flex answer within FLEX_MAX_WAIT_S ({self._max_wait_s:g} s).",
            )
            return None
        if result.outcome == "succeeded" and result.message is not None:
            message = result.message
            usage = message.get("usage") or {}
            if totals is not None:
                totals.answered(
                    "succeeded", waited, request.model, usage, self._factor, self._upstream
                )
            if self._metrics is not None:
                self._metrics.record_offline(
                    request.model,
                    usage,
                    requests=1,
                    surface=request.surface,
                    price_factor=self._factor,
                    tenant=request.tenant,
                )
            if grant is not None:
                grant.settle(
                    request.model, usage, upstream=self._upstream, price_factor=self._factor
                )
            message_id = message.get("id")
            if request.on_reply is not None and isinstance(message_id, str):
                await request.on_reply(message_id, self._upstream or "")
            raw = json.dumps(message, ensure_ascii=False).encode()
            body = codec.reply(message, raw)
            headers = codec.headers({})
            headers["Server-Timing"] = Timing(total=waited, queue=waited).server_timing_header()
            return JSONReply(body, headers)
        if totals is not None:
            totals.answered(result.outcome, waited)
        if result.outcome == "unavailable":
            reason = result.error.message if result.error is not None else "unknown"
            self._unavailable(
                request, grant, waited, f"The flex batch could not be used ({reason})."
            )
            return None
        if result.outcome == "errored" and result.error is not None:
            failure = result.error
            if grant is not None:  # it reached the upstream: the request counts, no tokens
                grant.settle(request.model, None)
        elif result.outcome == "shutdown":
            if grant is not None:
                grant.refund()
            failure = ProxyError(
                503,
                "The proxy is shutting down before this flex request's batch ended; retry "
                "on another instance.",
                code="shutdown",
                headers={"Retry-After": "1"},
            )
        else:  # expired, canceled: the batch ended without processing it
            if grant is not None:
                grant.refund()
            failure = ProxyError(
                503,
                f"The Message Batch carrying this flex request ended with it {result.outcome} "
                "(not processed, not billed); retry.",
                code=f"flex_{result.outcome}",
                headers={"Retry-After": "1"},
            )
        timing = Timing(total=waited, queue=waited)
        failure.headers["Server-Timing"] = timing.server_timing_header()
        self._outcomes.error(request, failure.status, timing, upstream=self._upstream)
        raise failure

    def _unavailable(
        self, request: UpstreamRequest, grant: TenantGrant | None, waited: float, why: str
    ) -> None:
        """``FLEX_ON_TIMEOUT``: return (go realtime; the grant stays, for that call) or
        raise 429."""
        if self._on_timeout == "realtime":
            return
        if grant is not None:
            grant.refund()
        failure = resource_unavailable(
            f"{why} Flex capacity is unavailable; retry later, or send the request without "
            "service_tier flex."
        )
        timing = Timing(total=waited, queue=waited)
        failure.headers["Server-Timing"] = timing.server_timing_header()
        self._outcomes.error(request, failure.status, timing)
        raise failure
