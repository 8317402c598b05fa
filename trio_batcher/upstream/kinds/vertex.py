"""Claude on Google Vertex AI, on the wire: where a call goes, what it carries, what its
errors mean. Pure; the bearer token comes from ``google_credentials``.

The official SDK's ``AnthropicVertex`` is the reference (``anthropic/lib/vertex/_client.py``):

- ``POST {base}/projects/{project}/locations/{region}/publishers/anthropic/models/{model}:rawPredict``,
  ``:streamRawPredict`` for a stream, ``.../models/count-tokens:rawPredict`` for counting;
  each value quoted as a path segment (RFC 3986 ``pchar``), a ``;`` in the model's segment
  as ``%3B`` (a server that drops ``;params`` would drop the ``:rawPredict`` with it);
- the base is regional (``https://{region}-aiplatform.googleapis.com/v1``), or
  ``https://aiplatform.googleapis.com/v1`` for ``global`` and the multi-region
  ``aiplatform.{us,eu}.rep.googleapis.com`` for ``us`` and ``eu``;
- the body is the Messages body without ``model`` (in the path), with
  ``anthropic_version`` (Vertex's is ``vertex-2023-10-16``); ``stream`` stays, and a
  stream answers Anthropic SSE, which ``upstream.sse`` already decodes;
- errors are Google's (``{"error": {"code", "message", "status"}}``) when Vertex itself
  refuses, and Anthropic's own when the model's service does; ``vertex_error`` maps both.

The body is re-serialised once, for the reasons ``bedrock`` gives.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, final
from urllib.parse import quote, urlsplit

from ...errors import ProxyError
from ..request import encode_body
from ._body import parse_body
from ._errors import cloud_error, lower_headers, type_for_status

__all__ = ["VERTEX_VERSION", "VertexTarget", "vertex_body", "vertex_error"]

VERTEX_VERSION: Final = "vertex-2023-10-16"

_DOT_SEGMENT: Final = re.compile(r"^(?:\.|%2[eE]){1,2}$")

# Google's canonical error codes -> (the Anthropic status, the Anthropic error type).
ERRORS: Final[Mapping[str, tuple[int, str]]] = {
    "INVALID_ARGUMENT": (400, "invalid_request_error"),
    "FAILED_PRECONDITION": (400, "invalid_request_error"),
    "OUT_OF_RANGE": (400, "invalid_request_error"),
    "UNAUTHENTICATED": (401, "authentication_error"),
    "PERMISSION_DENIED": (403, "permission_error"),
    "NOT_FOUND": (404, "not_found_error"),
    "ALREADY_EXISTS": (409, "conflict_error"),
    "ABORTED": (409, "conflict_error"),
    "RESOURCE_EXHAUSTED": (429, "rate_limit_error"),
    "CANCELLED": (500, "api_error"),
    "UNKNOWN": (500, "api_error"),
    "INTERNAL": (500, "api_error"),
    "DATA_LOSS": (500, "api_error"),
    "UNIMPLEMENTED": (500, "api_error"),
    "UNAVAILABLE": (529, "overloaded_error"),
    "DEADLINE_EXCEEDED": (504, "timeout_error"),
}


def _segment(value: str, name: str) -> str:
    if not value:
        raise ProxyError(
            400, f"Expected a non-empty {name}.", type="invalid_request_error", param=name
        )
    quoted = quote(value, safe="!$&'()*+,;=:@")
    if _DOT_SEGMENT.match(quoted.partition(";")[0]) or quoted.startswith(";"):
        raise ProxyError(
            400,
            f"The {name} {value!r} is not a usable path segment.",
            type="invalid_request_error",
            param=name,
        )
    return quoted


def default_base_url(region: str) -> str:
    """The SDK's endpoint for ``region``."""
    if region == "global":
        return "https://aiplatform.googleapis.com/v1"
    if region in ("us", "eu"):
        return f"https://aiplatform.{region}.rep.googleapis.com/v1"
    return f"https://{region}-aiplatform.googleapis.com/v1"


@final
@dataclass(frozen=True, slots=True)
class VertexTarget:
    """Where one Vertex deployment's calls go.

    Args:
      project: the Google Cloud project id.
      region: the location (``us-east5``, ``europe-west1``, ``global``...).
      base_url: another endpoint (a private one, a simulator), path prefix allowed;
        ``None``: the SDK's default for ``region``.
    """

    project: str
    region: str
    base_url: str | None = None

    @property
    def base(self) -> str:
        """The endpoint without a trailing slash."""
        return (self.base_url or default_base_url(self.region)).rstrip("/")

    @property
    def origin(self) -> str:
        """``scheme://host[:port]``: what the connection pool connects to."""
        parts = urlsplit(self.base)
        return f"{parts.scheme}://{parts.netloc}"

    def _models(self) -> str:
        project = _segment(self.project, "project")
        region = _segment(self.region, "region")
        prefix = urlsplit(self.base).path
        return f"{prefix}/projects/{project}/locations/{region}/publishers/anthropic/models"

    def path(self, model: str, *, stream: bool) -> str:
        """The path of a Messages call for ``model`` (the base URL's own path first).

        Raises:
          ProxyError: 400 ``param: "model"`` for an empty model or a dot segment.
        """
        specifier = "streamRawPredict" if stream else "rawPredict"
        segment = f"{_segment(model, 'model')}:{specifier}".replace(";", "%3B")
        return f"{self._models()}/{segment}"

    def count_tokens_path(self) -> str:
        """The path of a token count (the model is in the body for this one)."""
        return f"{self._models()}/count-tokens:rawPredict"

    def url(self, model: str, *, stream: bool) -> str:
        return self.origin + self.path(model, stream=stream)

    def count_tokens_url(self) -> str:
        return self.origin + self.count_tokens_path()


def vertex_body(
    body: Mapping[str, Any] | bytes,
    *,
    version: str = VERTEX_VERSION,
    count_tokens: bool = False,
) -> bytes:
    """The rawPredict body for a Messages request (re-serialised once).

    ``model`` goes (it is in the path) -- except for ``count-tokens``, whose path names
    no model; ``stream`` stays; ``anthropic_version`` is set unless the body names one.
    Betas travel as the ``anthropic-beta`` header on Vertex, as on Anthropic's API.

    Raises:
      ProxyError: 400 ``invalid_json`` as ``bedrock.bedrock_body`` does.
    """
    parsed = parse_body(body)
    out = dict(parsed) if count_tokens else {k: v for k, v in parsed.items() if k != "model"}
    out.setdefault("anthropic_version", version)
    return encode_body(out)


def _google_error(body: bytes | Mapping[str, Any] | None) -> tuple[object, dict[str, Any]]:
    parsed: object = body
    if isinstance(body, bytes | bytearray):
        try:
            parsed = json.loads(body)
        except ValueError:
            return None, {}
    if isinstance(parsed, list) and parsed:  # some Google front ends answer a list
        parsed = parsed[0]
    if not isinstance(parsed, Mapping):
        return None, {}
    error = parsed.get("error")
    return parsed, dict(error) if isinstance(error, Mapping) else {}


def vertex_error(
    status: int,
    headers: Mapping[str, str] | Mapping[bytes, bytes],
    body: bytes | Mapping[str, Any] | None,
) -> ProxyError:
    """The ``ProxyError`` for a Vertex error answer.

    An Anthropic error object (``{"type": "error", "error": {"type", ...}}``, the model
    service's own answer passed through Vertex) keeps its status and type as Anthropic's
    would; Google's shape is mapped by its ``status`` name (``RESOURCE_EXHAUSTED`` ->
    429 with a retry-after, ``UNAVAILABLE`` -> 529 overloaded...), else by the HTTP status.
    """
    upstream = lower_headers(headers)
    parsed, error = _google_error(body)
    request_id = upstream.get("request-id") or upstream.get("x-request-id")
    kind = error.get("type")
    message = error.get("message")
    text = message if isinstance(message, str) and message else None
    if isinstance(kind, str) and kind:  # Anthropic's own error, through Vertex
        anthropic_status = 401 if status == 401 else status
        error_type = kind
        throttled = False
        if isinstance(parsed, Mapping) and isinstance(parsed.get("request_id"), str):
            request_id = request_id or parsed["request_id"]
    else:
        name = error.get("status")
        if isinstance(name, str) and name in ERRORS:
            anthropic_status, error_type = ERRORS[name]
        elif status in (503, 529):
            anthropic_status, error_type = 529, "overloaded_error"
        else:
            anthropic_status = status if status >= 400 else 502
            error_type = type_for_status(anthropic_status)
        if status == 401:
            anthropic_status, error_type = 401, "authentication_error"
        throttled = anthropic_status == 429
    if text is None:
        text = f"Vertex AI answered HTTP {status}."
    return cloud_error(
        anthropic_status,
        error_type,
        text,
        upstream,
        request_id=request_id,
        credentials="Google credentials",
        throttled=throttled,
    )
