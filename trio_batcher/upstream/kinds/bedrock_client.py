"""The Bedrock kind's ``MessagesCaller``: Claude on Amazon Bedrock, answering as Anthropic.

Each call re-serialises the client's Messages body for Bedrock (``bedrock_body``: model and
stream go to the path, betas into the body, ``anthropic_version`` Bedrock's own -- an
``anthropic-version`` header is Anthropic's API's business and is not sent), signs it with
the gateway's AWS keys (``sign``, botocore's SigV4; keys from ``AwsCredentials``, cached
and refreshed off the loop) and sends it through the kind's own ``UpstreamPool``. What
comes back is restated in Anthropic's terms: a 200 message as it is (Bedrock's body *is*
Anthropic's), an error through ``bedrock_error``, a stream decoded from AWS event-stream
(``EventStreamDecoder``) into the same ``StreamEvent`` tuples an SSE stream yields
(``exchange.UpstreamStream``, so the stream job and the relay need no Bedrock branch).

``count_tokens`` is Bedrock's ``CountTokens`` (``POST /model/{id}/count-tokens``, the
InvokeModel body base64-encoded in ``{"input": {"invokeModel": {"body"}}}``, answering
``{"inputTokens": n}``), restated as Anthropic's ``{"input_tokens": n}``. Two adjustments
make an Anthropic count request an InvokeModel body Bedrock counts: ``max_tokens``, which
InvokeModel requires and a count request has not, is set (it does not change the count),
and a cross-Region inference profile id (``us.anthropic...``) is counted by its foundation
model's id (``anthropic...``), since CountTokens takes foundation models only and the
profile only routes.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Mapping
from typing import Any, Final, final

import trio

from ...errors import ProxyError
from ..client import CONNECT_TIMEOUT_S
from ..exchange import (
    UpstreamReply,
    UpstreamStream,
    body_of_200,
    check_size,
    is_message,
    json_reply,
    send,
    stream_start,
)
from ..pool import PooledResponse, UpstreamPool
from ..request import UpstreamRequest
from ._body import parse_body, prepared, source_of
from ._errors import credentials_failed
from .aws_credentials import AwsCredentials
from .bedrock import BedrockTarget, bedrock_body, bedrock_error, sign
from .eventstream import EventStreamDecoder

__all__ = ["BedrockClient", "foundation_model"]

EVENT_STREAM: Final = "application/vnd.amazon.eventstream"
# What a count request's InvokeModel body says for max_tokens (required there, unused here).
COUNT_MAX_TOKENS: Final = 1
_PROFILE: Final = re.compile(r"(?:us|eu|apac|global|jp|au|ca|us-gov)\.(anthropic\..+)")
# Headers sign() returns that the pool writes itself.
_POOL_HEADERS: Final = frozenset({"host", "content-length"})


def foundation_model(model: str) -> str:
    """The foundation model id behind a cross-Region inference profile id; other ids
    (foundation models, ARNs) as they are."""
    match = _PROFILE.fullmatch(model)
    return match.group(1) if match else model


def _betas(request: UpstreamRequest) -> str | None:
    values = [
        value.decode("latin-1") for name, value in request.headers if name == b"anthropic-beta"
    ]
    return ",".join(values) or None


# A traced attempt's context (``tracing``: the gateway adds it only when traces are on).
_TRACE_HEADERS: Final = frozenset({b"traceparent", b"tracestate"})


def _trace_context(request: UpstreamRequest) -> dict[str, str]:
    """The request's W3C trace context headers, for the call to carry (signed with it)."""
    return {
        name.decode("latin-1"): value.decode("latin-1")
        for name, value in request.headers
        if name in _TRACE_HEADERS
    }


@final
class BedrockClient:
    """Claude on Bedrock for one region (or endpoint), signed with one AWS identity.

    Args:
      target: where calls go and the SigV4 region.
      credentials: the keys that sign.
      pool: connections to ``target.origin`` (``for_target`` makes one); ``aclose`` closes it.
    """

    def __init__(
        self, target: BedrockTarget, credentials: AwsCredentials, pool: UpstreamPool
    ) -> None:
        self._target = target
        self._origin = target.origin  # what is signed: the URL the pool sends to
        self._credentials = credentials
        self._pool = pool
        self._large_bodies = trio.CapacityLimiter(1)

    @classmethod
    def for_target(cls, target: BedrockTarget, credentials: AwsCredentials) -> BedrockClient:
        """A client with its own pool to ``target.origin``."""
        return cls(
            target, credentials, UpstreamPool(target.origin, connect_timeout=CONNECT_TIMEOUT_S)
        )

    async def create_message(self, request: UpstreamRequest) -> UpstreamReply:
        """``InvokeModel``; raises ``ProxyError`` for anything but a message."""
        started = trio.current_time()
        source = source_of(request.content, request.body)
        betas = _betas(request)
        path = self._target.path(request.model, stream=False)
        response = await self._post(
            path,
            source,
            lambda: bedrock_body(source, betas),
            b"application/json",
            _trace_context(request),
        )
        first_byte = trio.current_time()
        raw = await body_of_200(response, bedrock_error)
        return json_reply(raw, response, started, first_byte, is_message, "a Messages API message")

    async def open_stream(self, request: UpstreamRequest) -> UpstreamStream:
        """``InvokeModelWithResponseStream``; returns once Bedrock answered 200."""
        started = trio.current_time()
        source = source_of(request.content, request.body)
        betas = _betas(request)
        path = self._target.path(request.model, stream=True)
        response = await self._post(
            path,
            source,
            lambda: bedrock_body(source, betas),
            EVENT_STREAM.encode(),
            _trace_context(request),
        )
        await stream_start(response, EVENT_STREAM, bedrock_error)
        return UpstreamStream(response, started, trio.current_time(), EventStreamDecoder())

    async def count_tokens(self, request: UpstreamRequest) -> UpstreamReply:
        """``CountTokens``, answered as Anthropic's ``{"input_tokens": n}``."""
        started = trio.current_time()
        source = source_of(request.content, request.body)
        betas = _betas(request)

        def envelope() -> bytes:
            counted = dict(parse_body(source))
            counted.setdefault("max_tokens", COUNT_MAX_TOKENS)
            invoke = base64.b64encode(bedrock_body(counted, betas)).decode()
            return json.dumps({"input": {"invokeModel": {"body": invoke}}}).encode()

        path = self._target.count_tokens_path(foundation_model(request.model))
        response = await self._post(
            path, source, envelope, b"application/json", _trace_context(request)
        )
        first_byte = trio.current_time()
        raw = await body_of_200(response, bedrock_error)
        try:
            answer = json.loads(raw)
        except ValueError:
            answer = None
        tokens = answer.get("inputTokens") if isinstance(answer, dict) else None
        if not isinstance(tokens, int) or isinstance(tokens, bool):
            raise ProxyError(
                502,
                "The upstream answered 200 with a body that is not a token count.",
                code="upstream_protocol_error",
            )
        message = {"input_tokens": tokens}
        return UpstreamReply(
            message,
            response.headers,
            started,
            first_byte,
            trio.current_time(),
            json.dumps(message).encode(),
        )

    async def list_models(self) -> list[dict[str, Any]]:
        """Nothing: the fleet lists the names it maps onto this upstream's models."""
        return []

    async def aclose(self) -> None:
        """Close its pool's connections."""
        await self._pool.aclose()

    async def _post(
        self,
        path: str,
        source: Mapping[str, Any] | bytes,
        build: Callable[[], bytes],
        accept: bytes,
        trace: Mapping[str, str],
    ) -> PooledResponse:
        """Build the body (``build``, off the loop for a large ``source``), sign it for
        ``path`` with the current keys, and send it. ``trace``: the attempt's trace
        context headers (none unless traces are on), signed with the rest."""
        try:
            keys = await self._credentials.get()
        except ProxyError:
            raise
        except Exception as exc:
            raise credentials_failed("AWS credentials", exc) from None
        url = self._origin + path
        headers = {"content-type": "application/json", "accept": accept.decode(), **trace}

        def signed() -> tuple[bytes, dict[str, str]]:
            content = check_size(build())
            return content, sign("POST", url, headers, content, keys, self._target.region)

        content, signature = await prepared(source, signed, self._large_bodies)
        wire = [
            (name.lower().encode("latin-1"), value.encode("latin-1"))
            for name, value in signature.items()
            if name.lower() not in _POOL_HEADERS
        ]
        return await send(self._pool, b"POST", self._pool.url(path), wire, content)
