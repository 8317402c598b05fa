"""Claude on Amazon Bedrock, on the wire: where a call goes, what it carries, how it is
signed, what its errors mean. Pure functions (botocore does the signing's arithmetic);
the credentials that sign live in ``aws_credentials``, the response stream's decoder in
``eventstream``.

Bedrock's runtime API is the Messages API moved around (the official SDK's
``AnthropicBedrock`` is the reference: ``anthropic/lib/bedrock/_client.py``):

- the model is in the path, ``/model/{modelId}/invoke`` or
  ``/model/{modelId}/invoke-with-response-stream``, the id quoted as the SDK quotes it
  (``urllib.parse.quote(model, safe=":;")``: an inference profile's ``...-v1:0`` keeps
  its colon in the URL; SigV4's canonical URI encodes it twice, which botocore does);
- the body is the Messages body without ``model`` and ``stream``, with
  ``anthropic_version`` and the ``anthropic-beta`` header's betas as ``anthropic_beta``;
- SigV4 signs it (service ``bedrock``), with botocore's own ``SigV4Auth``, so a signature
  is exactly what boto3 and the SDK would send;
- errors are ``x-amzn-ErrorType`` plus ``{"message"}``, mapped in ``bedrock_error``.

The body is re-serialised once (decided here, for the native ``/v1/messages`` relay too):
the gateway otherwise relays a client's bytes untouched, but two fields must go and one
or two be added, and editing JSON text in place is a parser of its own. The client's
bytes are parsed with the gateway's strict rules (``json_text.strict_loads``: what passes
serialises back without loss), the fields are changed, and the result is written once,
compact, keys in the client's order, non-ASCII as UTF-8. Every value the client sent
arrives with the same meaning; only whitespace and escapes may differ.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol, final
from urllib.parse import quote, urlsplit

from ...errors import ProxyError
from ..request import encode_body
from ._body import parse_body
from ._errors import cloud_error, lower_headers, type_for_status

__all__ = [
    "BEDROCK_VERSION",
    "BedrockTarget",
    "SigningKeys",
    "bedrock_body",
    "bedrock_error",
    "bedrock_error_type",
    "classify",
    "error_message",
    "sign",
]

# The ``anthropic_version`` Bedrock's Claude models accept; a body that names its own keeps it.
BEDROCK_VERSION: Final = "bedrock-2023-05-31"
SERVICE: Final = "bedrock"

# x-amzn-ErrorType -> (the Anthropic status it stands for, the Anthropic error type).
# Statuses are Anthropic's, for the resilience layer: 529 is "overloaded" (retry, back
# off), 429 a rate limit, 504 a timeout; see _errors for the 429's retry-after.
ERRORS: Final[Mapping[str, tuple[int, str]]] = {
    "ThrottlingException": (429, "rate_limit_error"),
    # The account's quota (tokens per day...): a spend limit, no retry-after, not retried.
    "ServiceQuotaExceededException": (429, "rate_limit_error"),
    "ServiceUnavailableException": (529, "overloaded_error"),
    "ModelNotReadyException": (529, "overloaded_error"),
    "ValidationException": (400, "invalid_request_error"),
    "AccessDeniedException": (403, "permission_error"),
    "ResourceNotFoundException": (404, "not_found_error"),
    "ConflictException": (409, "conflict_error"),
    "ModelTimeoutException": (504, "timeout_error"),
    "InternalServerException": (500, "api_error"),
    "ModelErrorException": (500, "api_error"),
    "ModelStreamErrorException": (500, "api_error"),
}
# AWS's answers for credentials it does not accept: the gateway's, not the client's.
CREDENTIAL_ERRORS: Final = frozenset(
    {
        "UnrecognizedClientException",
        "InvalidSignatureException",
        "IncompleteSignatureException",
        "ExpiredTokenException",
        "MissingAuthenticationTokenException",
        "InvalidClientTokenId",
        "SignatureDoesNotMatch",
    }
)
_THROTTLED: Final = frozenset({"ThrottlingException"})
_MODEL_ERRORS: Final = frozenset({"ModelErrorException", "ModelStreamErrorException"})


class SigningKeys(Protocol):
    """What signs: botocore's frozen credentials (``ReadOnlyCredentials``) fit."""

    @property
    def access_key(self) -> str: ...
    @property
    def secret_key(self) -> str: ...
    @property
    def token(self) -> str | None: ...


def _model_error(message: str) -> ProxyError:
    return ProxyError(400, message, type="invalid_request_error", param="model")


@final
@dataclass(frozen=True, slots=True)
class BedrockTarget:
    """Where one Bedrock deployment's calls go.

    Args:
      region: the AWS region (``us-east-1``); also the SigV4 signing region.
      base_url: another endpoint (a VPC endpoint, a simulator), path prefix allowed;
        ``None``: the SDK's default, ``https://bedrock-runtime.{region}.amazonaws.com``.
    """

    region: str
    base_url: str | None = None

    @property
    def base(self) -> str:
        """The endpoint without a trailing slash."""
        if self.base_url is not None:
            return self.base_url.rstrip("/")
        return f"https://bedrock-runtime.{self.region}.amazonaws.com"

    @property
    def origin(self) -> str:
        """``scheme://host[:port]``: what the connection pool connects to."""
        parts = urlsplit(self.base)
        return f"{parts.scheme}://{parts.netloc}"

    def path(self, model: str, *, stream: bool) -> str:
        """The request path for ``model`` (the base URL's own path first).

        Raises:
          ProxyError: 400 ``param: "model"`` for an empty model id, or one that is a dot
            segment (``.``, ``..``), which would name another path (the SDK refuses both).
        """
        return self._path(model, "invoke-with-response-stream" if stream else "invoke")

    def count_tokens_path(self, model: str) -> str:
        """The path of ``CountTokens`` for ``model`` (``/model/{modelId}/count-tokens``)."""
        return self._path(model, "count-tokens")

    def _path(self, model: str, action: str) -> str:
        before_params = model.partition(";")[0]
        if not before_params:
            raise _model_error(f"Expected a non-empty model id, got {model!r}.")
        if before_params in (".", ".."):
            raise _model_error(f"The model id {model!r} is not a usable path segment.")
        quoted = quote(model, safe=":;")
        return f"{urlsplit(self.base).path}/model/{quoted}/{action}"

    def url(self, model: str, *, stream: bool) -> str:
        """The full URL for ``model``: what is sent, and what is signed."""
        return self.origin + self.path(model, stream=stream)


def _betas(betas: str | Iterable[str] | None) -> list[str]:
    if betas is None:
        return []
    items = betas.split(",") if isinstance(betas, str) else betas
    return [beta.strip() for beta in items if beta.strip()]


def bedrock_body(
    body: Mapping[str, Any] | bytes,
    betas: str | Iterable[str] | None = None,
    *,
    version: str = BEDROCK_VERSION,
) -> bytes:
    """The InvokeModel body for a Messages request (re-serialised once: module docstring).

    Args:
      body: the Messages body, parsed or as the client sent it.
      betas: the ``anthropic-beta`` header's value (comma-separated) or its betas.
      version: the ``anthropic_version`` to set, unless the body names one.

    ``model`` and ``stream`` go (they are in the path); ``anthropic_version`` and
    ``anthropic_beta`` are set as the SDK sets them (``setdefault``: a body that already
    carries them keeps its own).

    Raises:
      ProxyError: 400 ``invalid_json`` for bytes that are not a JSON object by the
        gateway's rules, or that hold text which is not valid Unicode.
    """
    parsed = parse_body(body)
    out = {k: v for k, v in parsed.items() if k not in ("model", "stream")}
    out.setdefault("anthropic_version", version)
    listed = _betas(betas)
    if listed:
        out.setdefault("anthropic_beta", listed)
    return encode_body(out)


def sign(
    method: str,
    url: str,
    headers: Mapping[str, str],
    body: bytes,
    credentials: SigningKeys,
    region: str,
    *,
    service: str = SERVICE,
) -> dict[str, str]:
    """The headers to send: ``headers`` plus SigV4's (``Authorization``, ``X-Amz-Date``,
    ``X-Amz-Security-Token`` for temporary credentials), computed by botocore.

    ``Connection`` is left out of what is signed (and of what is returned), as the SDK
    does: a proxy on the way may drop it. The time is botocore's clock, as for boto3.
    Pure but for that clock; never logs the keys.
    """
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    kept = {k: v for k, v in headers.items() if k.lower() != "connection"}
    request = AWSRequest(method=method.upper(), url=url, headers=kept, data=body)
    keys = Credentials(credentials.access_key, credentials.secret_key, credentials.token)
    SigV4Auth(keys, service, region).add_auth(request)
    prepared = request.prepare()
    return {str(k): str(v) for k, v in prepared.headers.items() if v is not None}


def bedrock_error_type(raw: str) -> str:
    """``x-amzn-ErrorType``'s name: ``"ValidationException:http://internal..."`` and
    ``"com.amazon.coral#ValidationException"`` both name ``ValidationException``; the
    event stream's ``throttlingException`` names ``ThrottlingException``."""
    name = raw.partition(":")[0].rpartition("#")[2].strip()
    return name[:1].upper() + name[1:]


def classify(status: int, name: str, fields: Mapping[str, Any]) -> tuple[int, str]:
    """(the Anthropic status, the Anthropic error type) a Bedrock error stands for.

    ``name`` is the error's name (``bedrock_error_type``); one this table does not know
    falls back on the HTTP status (a 503 is overloaded like ``ServiceUnavailableException``,
    a 408 a timeout). ``ModelErrorException`` and its mid-stream twin
    ``ModelStreamErrorException`` carry the model's own status (``originalStatusCode``: 529
    for an overloaded model), which is used when it is an error status, so an overload
    mid-stream is retried as one. 401 means the gateway's credentials were refused.
    """
    if name in CREDENTIAL_ERRORS or status == 401:
        return 401, "authentication_error"
    original = fields.get("originalStatusCode")
    if name in _MODEL_ERRORS and isinstance(original, int) and 400 <= original < 600:
        return original, type_for_status(original)
    if name in ERRORS:
        return ERRORS[name]
    if status in (503, 529):
        return 529, "overloaded_error"
    if status == 408:
        return 504, "timeout_error"
    anthropic_status = status if status >= 400 else 502
    return anthropic_status, type_for_status(anthropic_status)


def error_message(body: bytes | Mapping[str, Any] | None) -> tuple[str | None, dict[str, Any]]:
    """(the message, all fields) of a Bedrock error body (``{"message"}`` or
    ``{"Message"}``); ``(None, {})`` for a body that is not a JSON object."""
    parsed: object = body
    if isinstance(body, bytes | bytearray):
        try:
            parsed = json.loads(body)
        except ValueError:
            return None, {}
    if not isinstance(parsed, Mapping):
        return None, {}
    fields = dict(parsed)
    for key in ("message", "Message"):
        value = fields.get(key)
        if isinstance(value, str) and value:
            return value, fields
    return None, fields


def bedrock_error(
    status: int,
    headers: Mapping[str, str] | Mapping[bytes, bytes],
    body: bytes | Mapping[str, Any] | None,
) -> ProxyError:
    """The ``ProxyError`` for a Bedrock error answer.

    The error's name comes from ``x-amzn-ErrorType`` (or the body's ``__type``), its
    meaning from ``classify``; the message is Bedrock's own, and the request id
    (``x-amzn-RequestId``) is relayed as ``request-id``.
    """
    upstream = lower_headers(headers)
    message, fields = error_message(body)
    raw_type = upstream.get("x-amzn-errortype") or fields.get("__type") or ""
    name = bedrock_error_type(str(raw_type))
    request_id = upstream.get("x-amzn-requestid") or upstream.get("x-amz-request-id")
    anthropic_status, error_type = classify(status, name, fields)
    if message is None:
        message = f"Bedrock answered HTTP {status}" + (f" ({name})." if name else ".")
    return cloud_error(
        anthropic_status,
        error_type,
        message,
        upstream,
        request_id=request_id,
        credentials="AWS credentials",
        throttled=name in _THROTTLED,
    )
