"""Upstream kinds: the wire adapters for Claude behind a cloud (Amazon Bedrock, Google
Vertex AI), beside the Anthropic kind that ``upstream.client`` speaks.

Each kind is small modules with one job: where a call goes and what body it carries
(``bedrock``, ``vertex``, pure), how it is authenticated (``aws_credentials``,
``google_credentials``: cached, refreshed off the event loop), how its stream reads
(``eventstream`` for Bedrock; Vertex streams SSE), and what its errors mean (mapped onto
Anthropic's, so resilience and the doors need no cloud branch: ``_errors``). The cloud
SDKs are optional extras imported only inside functions; ``require_extra(kind)``
(``extras``) is the start-time check that names the pip command.

The clients (``bedrock_client.BedrockClient``, ``vertex_client.VertexClient``) put those
together into ``upstream.caller.MessagesCaller``s, as ``upstream.client.UpstreamClient`` is
for Anthropic's API: the routing layer builds them from its configuration and calls every
kind alike.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._cached import CachedSecret as CachedSecret
from ._errors import THROTTLE_RETRY_AFTER_S as THROTTLE_RETRY_AFTER_S
from .aws_credentials import AwsCredentials as AwsCredentials
from .aws_credentials import AwsKeys as AwsKeys
from .bedrock import BEDROCK_VERSION as BEDROCK_VERSION
from .bedrock import BedrockTarget as BedrockTarget
from .bedrock import bedrock_body as bedrock_body
from .bedrock import bedrock_error as bedrock_error
from .bedrock import sign as sign
from .bedrock_client import BedrockClient as BedrockClient
from .eventstream import EventStreamDecoder as EventStreamDecoder
from .extras import MissingExtraError as MissingExtraError
from .extras import require_extra as require_extra
from .google_credentials import GoogleCredentials as GoogleCredentials
from .vertex import VERTEX_VERSION as VERTEX_VERSION
from .vertex import VertexTarget as VertexTarget
from .vertex import vertex_body as vertex_body
from .vertex import vertex_error as vertex_error
from .vertex_client import VertexClient as VertexClient

if TYPE_CHECKING:
    from ..caller import MessagesCaller
    from ..client import UpstreamClient

__all__ = [
    "BEDROCK_VERSION",
    "THROTTLE_RETRY_AFTER_S",
    "VERTEX_VERSION",
    "AwsCredentials",
    "AwsKeys",
    "BedrockClient",
    "BedrockTarget",
    "CachedSecret",
    "EventStreamDecoder",
    "GoogleCredentials",
    "MissingExtraError",
    "VertexClient",
    "VertexTarget",
    "bedrock_body",
    "bedrock_error",
    "require_extra",
    "sign",
    "vertex_body",
    "vertex_error",
]


def _conforms(
    anthropic: UpstreamClient, bedrock: BedrockClient, vertex: VertexClient
) -> tuple[MessagesCaller, ...]:
    """Never called: ``mypy --strict`` checks here that every kind's client is a
    ``MessagesCaller`` (a protocol is matched by shape, so nothing else would say so)."""
    return (anthropic, bedrock, vertex)
