"""Amazon Bedrock's runtime for Claude: ``POST /model/{modelId}/invoke``,
``/model/{modelId}/invoke-with-response-stream`` and ``/model/{modelId}/count-tokens``.

Checks in Bedrock's order: the caller (a SigV4 signature by the configured identity, see
``sigv4_check.py``, or a Bedrock API key as ``Authorization: Bearer``), the model id
(``cloud_models.py``; an unknown one is 400 ``ValidationException`` "The provided model
identifier is invalid."), the body: JSON, with no ``model`` or ``stream`` (both live in the
URL on Bedrock: "extraneous key [model] is not permitted"), with ``anthropic_version``
(``bedrock-2023-05-31``; the ``anthropic`` SDK 2.17 sends its own API version constant
there, so the Messages API versions are accepted too) and an optional ``anthropic_beta``
list (Bedrock's place for ``anthropic-beta``). Then the body, with the URL's model and the
route's ``stream`` put back, goes through the same core as ``POST /v1/messages``
(``messages_route.answer_messages``): validation, faults, rate limits, the reply. Its
refusals are rendered in Bedrock's dialect (``cloud_errors.py``); a stream is re-framed as
an AWS event stream (``bedrock_stream.py``). A non-stream reply carries Bedrock's
``X-Amzn-Bedrock-*-Token-Count`` and ``-Invocation-Latency`` headers.

``CountTokens`` (botocore's ``bedrock-runtime`` model: ``{"input": {"invokeModel": {"body":
base64}}}`` -> ``{"inputTokens": n}``) checks the caller and model the same way, then the
decoded InvokeModel body by the same rules as an invoke (it is counted "as if sent to
InvokeModel", so ``max_tokens`` is required), and answers the prompt's token count, as
``POST /v1/messages/count_tokens`` does; no faults or rate limits apply. It takes
foundation-model ids only: a cross-Region inference profile is refused with a
``ValidationException`` as Bedrock refuses it. Only ``invokeModel`` input is simulated.
"""

from __future__ import annotations

import base64
import binascii
import json
import time
from typing import Any, Final, cast

from quart import Response, request
from quart_trio import QuartTrio

from .bedrock_stream import bedrock_events
from .betas import parse_betas
from .cloud_errors import bedrock_error, bedrock_error_for
from .cloud_models import bedrock_model
from .config import API_VERSIONS
from .errors import SimulatorError
from .messages_route import answer_messages, request_trace
from .prompt import analyse_prompt
from .request_io import json_response, read_json
from .sigv4_check import SignatureRefused, check_sigv4
from .state import SimulatorState
from .validation import validate_messages_request

BEDROCK_VERSION: Final = "bedrock-2023-05-31"
_NO_COUNT: Final = "The provided model doesn't support counting tokens."
_MALFORMED: Final = "Malformed input request: #: {}, please reformat your input and try again."


async def handle_bedrock(state: SimulatorState, model_id: str, *, stream: bool) -> Response:
    """One Bedrock InvokeModel / InvokeModelWithResponseStream call. Closes the trace on
    every way out but a stream's (``delivery.py`` closes that)."""
    config = state.config
    trace, base = request_trace()
    try:
        try:
            raw, body = await read_json(config)
        except SimulatorError as error:
            raw, body = b"", None
            body_error: SimulatorError | None = error
        else:
            body_error = None
        refused = _check_caller(state, raw)
        if refused is not None:
            state.stats.finish(trace, "error", refused.status_code)
            return refused
        model = bedrock_model(model_id)
        if model is None:
            state.stats.finish(trace, "error", 400)
            return bedrock_error(
                400, "ValidationException", "The provided model identifier is invalid."
            )
        if body_error is not None:
            raise body_error
        api_version, betas = _check_body(body)
        body["model"] = model
        if stream:
            body["stream"] = True
        answer = await answer_messages(state, trace, base, raw, body, api_version, betas)
        if answer.events is None:
            response = json_response(answer.message)
            usage = answer.message["usage"]
            response.headers["X-Amzn-Bedrock-Input-Token-Count"] = str(usage["input_tokens"])
            response.headers["X-Amzn-Bedrock-Output-Token-Count"] = str(usage["output_tokens"])
            latency = round((time.monotonic() - trace.started_at) * 1000)
            response.headers["X-Amzn-Bedrock-Invocation-Latency"] = str(latency)
            return response
        response = Response(
            bedrock_events(answer.events, trace.started_at),
            status=200,
            content_type="application/vnd.amazon.eventstream",
        )
        response.headers["X-Amzn-Bedrock-Content-Type"] = "application/json"
        response.timeout = None
        return response
    except SimulatorError as error:
        state.stats.finish(trace, "error", error.status)
        return bedrock_error_for(error)


async def handle_bedrock_count(state: SimulatorState, model_id: str) -> Response:
    """One Bedrock CountTokens call (no trace: it generates nothing)."""
    config = state.config
    body_error: SimulatorError | None = None
    try:
        raw, envelope = await read_json(config)
    except SimulatorError as error:
        raw, envelope, body_error = b"", None, error
    refused = _check_caller(state, raw)
    if refused is not None:
        return refused
    model = bedrock_model(model_id)
    if model is None:
        return bedrock_error(
            400, "ValidationException", "The provided model identifier is invalid."
        )
    if model_id.startswith("arn:") or not model_id.startswith("anthropic."):
        return bedrock_error(400, "ValidationException", _NO_COUNT)
    try:
        if body_error is not None:
            raise body_error
        body = _invoke_body(envelope)
        api_version, betas = _check_body(body)
        body["model"] = model
        validate_messages_request(body, api_version=api_version, betas=betas)
    except SimulatorError as error:
        return bedrock_error_for(error)
    prompt = analyse_prompt(body, seed=config.seed, cache_hint=False)
    return json_response({"inputTokens": prompt.input_tokens})


def _invoke_body(envelope: Any) -> Any:
    """The InvokeModel body a CountTokens request carries, decoded."""
    source = envelope.get("input") if isinstance(envelope, dict) else None
    invoke = source.get("invokeModel") if isinstance(source, dict) else None
    encoded = invoke.get("body") if isinstance(invoke, dict) else None
    if not isinstance(encoded, str):
        raise SimulatorError(
            400,
            "1 validation error detected: Value at 'input.invokeModel.body' failed to "
            "satisfy constraint: Member must not be null",
        )
    try:
        return json.loads(base64.b64decode(encoded, validate=True))
    except (ValueError, binascii.Error):
        raise SimulatorError(400, _MALFORMED.format("expected type: JSONObject")) from None


def _check_caller(state: SimulatorState, body: bytes) -> Response | None:
    """The refusal for a request not from the configured identity, else ``None``."""
    config = state.config
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme == "Bearer":
        if token.strip() and token.strip() in config.bedrock_api_keys:
            return None
        return bedrock_error(
            403,
            "UnrecognizedClientException",
            "The security token included in the request is invalid.",
        )
    scope = cast(dict[str, Any], request.scope)
    raw_path: bytes = scope.get("raw_path") or scope["path"].encode()
    query: bytes = scope.get("query_string", b"")
    host = request.headers.get("host", "localhost")
    url = f"{scope.get('scheme', 'http')}://{host}{raw_path.decode('latin-1')}"
    if query:
        url += "?" + query.decode("latin-1")
    try:
        check_sigv4(
            method=request.method,
            url=url,
            headers=[(name, value) for name, value in request.headers.items()],
            body=body,
            access_key=config.aws_access_key_id,
            secret_key=config.aws_secret_access_key,
            region=config.aws_region,
            service="bedrock",
            max_skew_s=config.aws_clock_skew_s,
        )
    except SignatureRefused as refused:
        return bedrock_error(403, refused.error_type, refused.message)
    return None


def _check_body(body: Any) -> tuple[str, frozenset[str]]:
    """Bedrock's own body rules; strips ``anthropic_version`` and ``anthropic_beta`` and
    returns the API version the Messages validation applies and the betas."""
    if not isinstance(body, dict):
        raise SimulatorError(400, _MALFORMED.format("expected type: JSONObject"))
    for key in ("model", "stream"):
        if key in body:
            raise SimulatorError(400, _MALFORMED.format(f"extraneous key [{key}] is not permitted"))
    version = body.pop("anthropic_version", None)
    if version is None:
        raise SimulatorError(400, _MALFORMED.format("required key [anthropic_version] not found"))
    if version == BEDROCK_VERSION:
        api_version = "2023-06-01"
    elif isinstance(version, str) and version in API_VERSIONS:
        api_version = version
    else:
        raise SimulatorError(400, f"Invalid API version: {json.dumps(version)}")
    betas = body.pop("anthropic_beta", [])
    if not isinstance(betas, list) or not all(isinstance(b, str) for b in betas):
        raise SimulatorError(
            400, _MALFORMED.format("anthropic_beta: expected type: JSONArray of strings")
        )
    return api_version, parse_betas(betas)


def add_bedrock_routes(app: QuartTrio, state: SimulatorState) -> None:
    """Register Bedrock's invoke and count routes on ``app``."""

    @app.post("/model/<path:model_id>/invoke")
    async def invoke(model_id: str) -> Response:
        return await handle_bedrock(state, model_id, stream=False)

    @app.post("/model/<path:model_id>/invoke-with-response-stream")
    async def invoke_stream(model_id: str) -> Response:
        return await handle_bedrock(state, model_id, stream=True)

    @app.post("/model/<path:model_id>/count-tokens")
    async def bedrock_count_tokens(model_id: str) -> Response:
        return await handle_bedrock_count(state, model_id)


def is_bedrock_invoke(path: str) -> bool:
    """Whether ``path`` is one of Bedrock's invoke routes (the app traces those)."""
    return path.startswith("/model/") and (
        path.endswith("/invoke") or path.endswith("/invoke-with-response-stream")
    )
