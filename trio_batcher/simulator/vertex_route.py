"""Claude on Google Vertex AI: ``POST /v1/projects/{project}/locations/{region}/publishers/
anthropic/models/{model}:rawPredict`` (and ``:streamRawPredict``), ``.../models/
count-tokens:rawPredict``, and the OAuth token endpoint ``POST /token`` (``google_tokens.py``)
that a service-account JSON's ``token_uri`` can point at.

Checks in Vertex's order, its front door first: ``Authorization: Bearer`` with an access
token ``/token`` issued and that has not expired (else 401 ``UNAUTHENTICATED``), the project
(and region, if one is configured; else 403 ``PERMISSION_DENIED``), the publisher model
(``cloud_models.py``; else 404 ``NOT_FOUND``). Then the model server's: a JSON body without
``model`` (it is in the URL) and with ``anthropic_version`` (``vertex-2023-10-16``; the
``anthropic`` SDK 2.17 sends its API version constant there, so the Messages API versions
are accepted too), ``anthropic-beta`` as a header as on Anthropic's API, then the same core
as ``POST /v1/messages`` (``messages_route.answer_messages``). The body keeps ``stream``; a
stream is Anthropic's SSE unchanged. Errors: see ``cloud_errors.py`` (Google's shape from
the front door, including a rate limit as 429 ``RESOURCE_EXHAUSTED``; Anthropic's shape,
passed through, for the model server's refusals and 529 overload).
"""

from __future__ import annotations

from typing import Any, Final, cast

from quart import Response, request
from quart_trio import QuartTrio

from .cloud_errors import google_error, vertex_is_google
from .cloud_models import vertex_model
from .config import API_VERSIONS
from .errors import SimulatorError, SimulatorInvalidRequest
from .google_tokens import GoogleTokens, GrantRefused
from .messages_route import answer_messages, answer_response, request_trace
from .prompt import analyse_prompt
from .request_io import TRACE_KEY, error_response, json_response, read_json, request_betas
from .state import SimulatorState
from .validation import validate_count_tokens_request

VERTEX_VERSION: Final = "vertex-2023-10-16"
_MODELS: Final = "/v1/projects/<project>/locations/<region>/publishers/anthropic/models/<spec>"


def add_vertex_routes(
    app: QuartTrio, state: SimulatorState, tokens: GoogleTokens | None = None
) -> None:
    """Register the Vertex AI routes and the token endpoint on ``app``.

    ``tokens``: the access tokens issued and accepted, when shared with other simulators
    (one Google token endpoint serves every Vertex region); ``None``: this app's own.
    """
    config = state.config
    if tokens is None:
        tokens = GoogleTokens(
            config.vertex_client_email,
            config.vertex_public_key_pem,
            config.vertex_token_lifetime_s,
        )

    @app.post("/token")
    async def token() -> Response:
        form = {key: value for key, value in (await request.form).items()}
        audience = f"{request.scheme}://{request.host}/token"
        try:
            return json_response(tokens.exchange(form, audience))
        except GrantRefused as refused:
            body = {"error": refused.error, "error_description": refused.description}
            return json_response(body, status=400)

    @app.post(_MODELS)
    async def predict(project: str, region: str, spec: str) -> Response:
        model, _, method = spec.rpartition(":")
        refused = _front_door(state, tokens, project, region, model, method)
        if refused is not None:
            return refused
        if model == "count-tokens":
            return await _count_tokens(state)
        return await _messages(state, vertex_model(model) or model)


def _front_door(
    state: SimulatorState,
    tokens: GoogleTokens,
    project: str,
    region: str,
    model: str,
    method: str,
) -> Response | None:
    """Vertex's own checks (auth, project, model, method); the refusal, else ``None``."""
    config = state.config
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return _finished(
            state,
            google_error(
                401,
                "Request is missing required authentication credential. Expected OAuth 2 "
                "access token, login cookie or other valid authentication credential.",
            ),
        )
    why = tokens.check(token.strip())
    if why is not None:
        return _finished(state, google_error(401, why))
    resource = f"projects/{project}/locations/{region}/publishers/anthropic/models/{model}"
    if project != config.vertex_project or (
        config.vertex_region is not None and region != config.vertex_region
    ):
        return _finished(
            state,
            google_error(
                403,
                f"Permission 'aiplatform.endpoints.predict' denied on resource "
                f"'//aiplatform.googleapis.com/{resource}' (or it may not exist).",
            ),
        )
    known = model == "count-tokens" and method == "rawPredict"
    known = known or (
        vertex_model(model) is not None and method in ("rawPredict", "streamRawPredict")
    )
    if not known:
        return _finished(state, google_error(404, f"Publisher Model `{resource}` not found."))
    return None


def _finished(state: SimulatorState, response: Response) -> Response:
    """Close the request's trace (if it has one) as refused with ``response``'s status."""
    trace = cast(dict[str, Any], request.scope).get(TRACE_KEY)
    if trace is not None:
        state.stats.finish(trace, "error", response.status_code)
    return response


def _api_version(body: Any) -> str:
    """Checks and strips ``anthropic_version``; the version the validation applies."""
    if not isinstance(body, dict):
        raise SimulatorInvalidRequest("body: Input should be a valid dictionary")
    version = body.pop("anthropic_version", None)
    if version is None:
        raise SimulatorInvalidRequest("anthropic_version: Field required")
    if version == VERTEX_VERSION:
        return "2023-06-01"
    if isinstance(version, str) and version in API_VERSIONS:
        return version
    raise SimulatorInvalidRequest(f"anthropic_version: Input should be '{VERTEX_VERSION}'")


def _vertex_error(error: SimulatorError) -> Response:
    if vertex_is_google(error):
        return google_error(error.status, error.message)
    return error_response(error)


async def _messages(state: SimulatorState, model: str) -> Response:
    trace, base = request_trace()
    try:
        raw, body = await read_json(state.config)
        api_version = _api_version(body)
        if "model" in body:
            raise SimulatorInvalidRequest("model: Extra inputs are not permitted")
        body["model"] = model
        answer = await answer_messages(state, trace, base, raw, body, api_version, request_betas())
        return answer_response(answer)
    except SimulatorError as error:
        state.stats.finish(trace, "error", error.status)
        return _vertex_error(error)


async def _count_tokens(state: SimulatorState) -> Response:
    config = state.config
    try:
        _, body = await read_json(config)
        api_version = _api_version(body)
        model = body.get("model")
        if isinstance(model, str):
            body["model"] = vertex_model(model) or model
        validate_count_tokens_request(body, api_version=api_version, betas=request_betas())
        prompt = analyse_prompt(body, seed=config.seed, cache_hint=False)
        return json_response({"input_tokens": prompt.input_tokens})
    except SimulatorError as error:
        return _vertex_error(error)


def is_vertex_predict(path: str) -> bool:
    """Whether ``path`` is a Vertex Messages call (the app traces those; not count-tokens)."""
    return (
        path.startswith("/v1/projects/")
        and "/publishers/anthropic/models/" in path
        and not path.endswith("/count-tokens:rawPredict")
        and (path.endswith(":rawPredict") or path.endswith(":streamRawPredict"))
    )
