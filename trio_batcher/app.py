"""The quart-trio application: routes, error shapes, auth, and the lifespan that owns it all.

``create_app(settings)`` builds a fresh app with no module-level state, so tests and
embedded uses can run several side by side. The ASGI lifespan (quart-trio's
``before_serving`` / ``after_serving``) owns everything long-lived: the one outbound HTTP
pool, the dispatcher task (started in ``app.nursery``, which quart-trio opens for the
lifespan), the admission gate and the metrics registry.

Every response the proxy itself produces for an error is OpenAI-shaped
(``{"error": {"message", "type", "param", "code"}}``), including 404s, 405s and 413s that
Quart raises before a view runs.
"""

from __future__ import annotations

import json
import logging
from functools import partial
from typing import Any, Final, final

import trio
from quart import Response, request
from quart_trio import QuartTrio
from quart_trio.wrappers import TrioRequest
from werkzeug.exceptions import HTTPException

from .edge.anthropic_batches import BATCHES_PATH as MESSAGE_BATCHES_PATH
from .edge.anthropic_batches import MAX_CREATE_BYTES, register_anthropic_batches
from .edge.anthropic_files import AnthropicFiles
from .edge.anthropic_messages import COUNT_TOKENS_PATH, MESSAGES_PATH, CountTokensDoor, MessagesDoor
from .edge.anthropic_models import anthropic_model, anthropic_model_list
from .edge.api_routes import rule_for
from .edge.auth import client_key, key_matches, proxy_key_error
from .edge.background import BackgroundRunner
from .edge.body import body_too_large
from .edge.cors import OriginPolicy
from .edge.endpoint import ApiEndpoint
from .edge.hosts import HostPolicy
from .edge.http import speaks_anthropic
from .edge.models import find_model, list_models
from .edge.openai_batches import BATCHES_PATH, batches_blueprint
from .edge.openai_chat import CHAT_PATH, OpenAIChatDoor
from .edge.openai_files import FILES_PATH, MAX_UPLOAD_BYTES, files_blueprint
from .edge.openai_responses import RESPONSES_PATH, ResponsesDoor
from .edge.responses_routes import responses_blueprint
from .edge.upload_flow import SCOPE_KEY as UPLOAD_GATE
from .edge.upload_flow import GatedBody, UploadFlow
from .edge.visuals import visual_file
from .edge.websocket import NoWebSockets
from .errors import ProxyError, error_body
from .logs import RefusalLog, route_family
from .observatory.background import BackgroundCollector
from .observatory.batch_status import BatchStatusCollector, BatchStatusGauge
from .offline import BatchPoller, purge_batches_periodically
from .runtime import Runtime, effective_settings
from .serving import tidy_heap_periodically
from .settings import Settings
from .store import (
    SQLiteBatchStore,
    SQLiteFileStore,
    SQLiteResponseStore,
    StoreUnavailable,
    resolve_data_dir,
)
from .store.data_dir import check_data_dir
from .store.deployment import deployment_of
from .store.owned import OwnedObjects
from .store.purge import purge_expired_periodically
from .tenants import TenantsWatcher
from .tracing import NOOP_TRACING
from .translation.anthropic_messages import error_reply as anthropic_error_reply
from .translation.openai_chat import TranslationOptions
from .upstream.batches import MessageBatchesClient

log = logging.getLogger("trio_batcher")

_JSON: Final = "application/json"
# After the grace period, how long the answers to cancelled requests may take to go out.
_ANSWER_MARGIN_S: Final = 2.0
WORK_DIR: Final = "batch-work"  # under DATA_DIR: each deployment's poller locks and spools


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    data = json.dumps(body, separators=(",", ":"), ensure_ascii=False)
    return Response(data, status=status, headers=headers, content_type=_JSON)


def _client_key() -> str | None:
    headers = request.headers
    return client_key(
        headers.get("Authorization"), headers.get("api-key"), headers.get("x-api-key")
    )


@final
class _ProxyRequest(TrioRequest):
    """Quart's request, with a body limit that fits the route: a batch file upload may be
    far larger than ``MAX_BODY_BYTES`` (it is streamed to disk, ``edge.openai_files``), and
    is read no faster than it is written (``edge.upload_flow``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if len(args) > 2 and args[0] == "POST" and args[2] == FILES_PATH:
            kwargs["max_content_length"] = MAX_UPLOAD_BYTES
        elif len(args) > 2 and args[0] == "POST" and args[2] == MESSAGE_BATCHES_PATH:
            kwargs["max_content_length"] = MAX_CREATE_BYTES
        super().__init__(*args, **kwargs)
        gate = kwargs.get("scope", {}).get(UPLOAD_GATE)
        if gate is not None:  # read at the pace the upload is written to disk
            self.body = GatedBody(gate, self.content_length, kwargs["max_content_length"])


@final
class ProxyApp(QuartTrio):
    """The proxy's quart-trio app; ``runtime`` exists while it is serving."""

    runtime: Runtime | None = None
    request_class = _ProxyRequest
    batch_poller: BatchPoller | None = None
    background: BackgroundRunner | None = None

    def record_rejected(self, reason: str) -> None:
        """Count a request refused before it reached any route (``rejected.by_reason``)."""
        rt = self.runtime
        if rt is not None and rt.metrics is not None:
            rt.metrics.record_rejected(reason)

    async def drain(self) -> None:
        """Stop admitting, let in-flight work finish, answer the rest; return when done.

        ``serve_app`` awaits this inside hypercorn's shutdown trigger, so the listener stays
        open meanwhile: a request that arrives during the drain gets an immediate 503
        ``shutdown`` (a load balancer retries it elsewhere) instead of a connection that
        hangs. In-flight requests and streams may finish for ``SHUTDOWN_GRACE_S``; whatever
        is still running then is cancelled and answered with a 503 (mid-stream: an error
        event). Only then does hypercorn close connections and run the lifespan shutdown.
        Idempotent.
        """
        rt = self.runtime
        if rt is None:
            return
        background = self.background
        if not rt.draining:
            rt.draining = True
            rt.gate.close()
            rt.dispatcher.close()
            if rt.flex is not None:  # flushes what it holds; its batches answer on
                rt.flex.close()
            if background is not None:  # queued background responses fail now
                background.close()
            with trio.move_on_after(rt.settings.shutdown_grace_s):
                await rt.gate.wait_idle()
                await rt.dispatcher.wait_drained()
                if rt.flex is not None:
                    await rt.flex.wait_idle()
                if background is not None:
                    await background.wait_idle()
            if rt.flex is not None:
                rt.flex.fail_remaining()
            if rt.gate.statistics().active or not rt.dispatcher.statistics().idle:
                log.warning("shutdown grace period over: cancelling the requests still running")
            rt.dispatcher.cancel_remaining()
            if background is not None:  # each is stored failed, saying why
                background.cancel_remaining()
            rt.drained.set()
        # Answers to cancelled requests take a moment to be written; don't wait forever.
        with trio.move_on_after(_ANSWER_MARGIN_S):
            await rt.drained.wait()
            await rt.gate.wait_idle()
            if background is not None:
                await background.wait_idle()


async def _report_other_deployments(batches: SQLiteBatchStore, deployment_id: str) -> None:
    """Say at startup that the data directory holds other deployments' unfinished batches,
    which this gateway leaves alone: after a key rotation without ``DEPLOYMENT_ID``, that is
    where the old key's batches went."""
    try:
        others = await batches.others_unfinished()
    except StoreUnavailable:
        return  # the poller and every batch route report the store's failure
    for other, count in sorted(others.items()):
        log.info(
            "DATA_DIR also holds %d unfinished batches of deployment %s; this one (%s) "
            "leaves them alone (set DEPLOYMENT_ID=%s to take them over)",
            count,
            other or "(stored before deployments; no real gateway has started here since)",
            deployment_id,
            other or "<id>",
        )


def create_app(settings: Settings | None = None) -> ProxyApp:
    """A new proxy app. Serve it with ``trio_batcher.serving.serve_app`` or hypercorn."""
    settings = settings if settings is not None else Settings.from_env()
    # With UPSTREAMS_FILE, its first anthropic upstream is the one the stateful parts
    # (Message Batches, the deployment's identity) use.
    settings = effective_settings(settings)
    app = ProxyApp("trio_batcher")
    app.config["MAX_CONTENT_LENGTH"] = settings.max_body_bytes
    app.config["RESPONSE_TIMEOUT"] = None  # streams are bounded by REQUEST_TIMEOUT_S instead
    # Opened on first use. Everything stored is this deployment's and invisible to any
    # other sharing the data directory (store.deployment).
    data_dir = resolve_data_dir(settings.data_dir)
    deployment = deployment_of(settings)
    responses = SQLiteResponseStore(data_dir, deployment=deployment)
    # Background responses (Responses API): run by this process, in the lifespan's nursery.
    app.background = background = BackgroundRunner(
        responses,
        max_running=settings.background_max_running,
        max_queued=settings.background_max_queued,
        stream_buffer_bytes=settings.background_stream_buffer_bytes,
    )
    files = SQLiteFileStore(data_dir, deployment=deployment)
    batches = SQLiteBatchStore(data_dir, files, deployment=deployment)
    # Who owns each object Anthropic keeps for the gateway (Message Batches, files,
    # threads relayed natively): store.owned.
    owned = OwnedObjects(data_dir, deployment=deployment)
    # Who is who: PROXY_API_KEYS and the tenants file (read by runtime.check_files, so a
    # bad file has already stopped `serve`; here it raises). Reloaded while serving.
    tenants = TenantsWatcher(settings.tenants_file, proxy_api_keys=settings.proxy_api_keys)

    batch_status = BatchStatusGauge(batches.status_counts)

    def keyed() -> bool:
        return tenants.directory.auth_required

    # Anthropic's Files API on the same paths as OpenAI's, told apart per request.
    anthropic_files = AnthropicFiles(owned, lambda: app.runtime, lambda: tenants.directory)
    # The 4xx the gateway answers, logged once a minute per route and reason (logs.refusals).
    refusals = RefusalLog()
    endpoint = ApiEndpoint(
        anthropic_files.wrap(UploadFlow(app.asgi_app, FILES_PATH)),
        lambda: app.runtime.pipeline if app.runtime is not None else None,
        {
            CHAT_PATH: OpenAIChatDoor(settings),
            # Threads and file sources are each tenant's own (edge.anthropic_threads, _files).
            MESSAGES_PATH: MessagesDoor(owned, anthropic_files.known_file),
            COUNT_TOKENS_PATH: CountTokensDoor(),
            RESPONSES_PATH: ResponsesDoor(settings, responses, keyed, background),
        },
        max_body_bytes=settings.max_body_bytes,
        tenants=lambda: tenants.directory,
        body_timeout=settings.request_timeout_s,
        body_window=settings.body_read_timeout_s,
        quart_bodies=frozenset({FILES_PATH, BATCHES_PATH, MESSAGE_BATCHES_PATH}),
        refusals=refusals,
        tracing=lambda: app.runtime.tracing if app.runtime is not None else NOOP_TRACING,
    )
    hosts = HostPolicy(
        endpoint,
        settings.allowed_hosts,
        keyed,
        on_refused=lambda: app.record_rejected("host_not_allowed"),
    )
    origins = OriginPolicy(
        hosts,
        settings.cors_allow_origins,
        on_refused=lambda: app.record_rejected("origin_not_allowed"),
    )
    app.asgi_app = NoWebSockets(  # type: ignore[method-assign,assignment]
        origins, on_refused=lambda: app.record_rejected("websocket_not_supported")
    )

    def runtime() -> Runtime:
        if app.runtime is None:
            raise ProxyError(503, "The proxy is starting up.", code="starting")
        return app.runtime

    @app.before_serving
    async def _startup() -> None:
        try:
            warning = await trio.to_thread.run_sync(
                partial(check_data_dir, data_dir, default=settings.data_dir is None)
            )
        except OSError as exc:  # every request that needs the store will say so too
            log.warning("DATA_DIR %s is not usable: %s", data_dir, exc)
        else:
            if warning is not None:
                log.warning("%s", warning)
        rt = Runtime(settings, tenants)
        rt.gc_pauses.install()
        await app.nursery.start(tenants.run)
        if rt.shared is not None:  # connected before the first job asks for a slot
            await app.nursery.start(rt.shared.run)
        await app.nursery.start(rt.run_ledger)
        await app.nursery.start(rt.dispatcher.run)
        if rt.flex is not None:
            await app.nursery.start(rt.flex.run)
        app.nursery.start_soon(
            tidy_heap_periodically, settings.heap_trim_interval_s, rt.requests_finished_and_open
        )
        app.nursery.start_soon(purge_expired_periodically, responses)
        await app.nursery.start(background.run, rt.pipeline)

        # One task for the batches, stepping several at once, sharing them with the other
        # processes of the deployment; it resumes the unfinished ones after a restart.
        app.batch_poller = BatchPoller(
            batches,
            files,
            MessageBatchesClient(settings, rt.http),
            TranslationOptions(
                default_model=settings.default_model,
                default_max_tokens=settings.default_max_tokens,
                anthropic_version=settings.anthropic_version,
            ),
            data_dir / WORK_DIR / deployment.slug,
            on_usage=rt.record_batch_usage,
            legacy_work_dir=data_dir / WORK_DIR if deployment.adopts_legacy else None,
            max_file_requests=settings.batch_file_max_requests,
            concurrency=settings.batch_poll_concurrency,
        )
        await app.nursery.start(app.batch_poller.run)
        app.nursery.start_soon(purge_batches_periodically, batches, settings.batch_retention_days)
        app.nursery.start_soon(_report_other_deployments, batches, deployment.id)
        if rt.prometheus is not None:
            rt.prometheus.collector_registry.register(BatchStatusCollector(batch_status))
            rt.prometheus.collector_registry.register(BackgroundCollector(background.stats))
        app.runtime = rt
        log.info(
            "trio-batcher ready: upstream %s, state %s (deployment %s), batching %s, gate %s",
            settings.anthropic_base_url,
            data_dir,
            deployment.id,
            "on" if settings.batch_enabled else "off",
            settings.max_inflight or "off",
        )

    @app.after_serving
    async def _shutdown() -> None:
        rt = app.runtime
        if rt is None:
            return
        # Under `trio-batcher serve` the drain has already run; under a bare hypercorn
        # command line this is the first notice, and hypercorn has closed connections.
        await app.drain()
        rt.gc_pauses.uninstall()
        with trio.CancelScope(shield=True), trio.move_on_after(5):
            await rt.aclose()
            await responses.aclose()
            await owned.aclose()
            await batches.aclose()
            await files.aclose()

    # -- errors ---------------------------------------------------------------------------

    def _tenant_name() -> str | None:
        tenant = tenants.directory.lookup(_client_key())
        return tenant.name if tenant is not None else None

    def _refused(exc: ProxyError) -> Response:
        """``exc`` answered, and logged if it is a 4xx of the gateway's own; the route is
        the pattern that matched (``/v1/files/<file_id>``), never a path with its ids."""
        rule = request.url_rule
        route = route_family(request.path, rule.rule if rule is not None else None)
        refusals.answered(exc, method=request.method, route=route, tenant=_tenant_name)
        return _error_response(exc)

    @app.errorhandler(ProxyError)
    async def _proxy_error(exc: ProxyError) -> Response:
        return _refused(exc)

    @app.errorhandler(HTTPException)
    async def _http_error(exc: HTTPException) -> Response:
        status = exc.code or 500
        headers: dict[str, str] = {}
        if status == 404:
            rule = rule_for(request.path.rstrip("/") or "/")
            if rule is not None and rule.treatment == "refused":
                # A route of Anthropic's API that keeps unscoped state or administers the
                # gateway's organisation: refused, never relayed (edge.api_routes).
                app.record_rejected("unsupported_by_gateway")
                return _refused(
                    ProxyError(
                        400,
                        f"{rule.feature} ({request.method} {request.path}) is not relayed "
                        f"by this gateway: {rule.why}.",
                        type="invalid_request_error",
                        code="unsupported_by_gateway",
                    )
                )
            message = f"Unknown route: {request.method} {request.path}."
            other_api = _OTHER_OPENAI_APIS.get(request.path.rstrip("/"))
            if other_api is not None:
                message += (
                    " This gateway serves OpenAI's Chat Completions, Responses and Batch "
                    f"APIs, not the {other_api}: point the client at POST "
                    "/v1/chat/completions or POST /v1/responses."
                )
            elif rule is not None:
                message += (
                    f" It is under {rule.feature}, which this gateway relays, but not this "
                    "route of it (the routes and what each does: docs/compatibility.md)."
                )
            else:
                message += (
                    " It is no route of OpenAI's or Anthropic's APIs that this gateway "
                    "serves (the routes and what each does: docs/compatibility.md)."
                )
        elif status == 405:
            allowed = ", ".join(sorted(getattr(exc, "valid_methods", None) or ()))
            message = f"Method {request.method} is not allowed on {request.path}."
            if allowed:
                headers["Allow"] = allowed
                message += f" Allowed: {allowed}."
        elif status == 413:
            message = body_too_large(settings.max_body_bytes).message
        else:
            message = exc.description or exc.name
        err = ProxyError(status, message, code=_slug(exc.name), headers=headers)
        return _refused(err)

    @app.errorhandler(Exception)
    async def _unexpected(exc: Exception) -> Response:
        # ascii(): the path is the client's, and must not write lines of its own into the log
        log.exception("unhandled error on %s %s", request.method, ascii(request.path))
        return json_response(error_body("Internal proxy error.", "server_error"), 500)

    # -- auth -----------------------------------------------------------------------------

    @app.before_request
    async def _authenticate() -> None:
        directory = tenants.directory
        if not directory.auth_required or not request.path.startswith("/v1/"):
            return
        if directory.lookup(_client_key()) is None:
            raise proxy_key_error()

    # -- routes ---------------------------------------------------------------------------

    @app.get("/health")
    async def health() -> Response:
        rt = app.runtime
        if rt is None or rt.draining:
            return json_response({"status": "shutting_down" if rt else "starting"}, 503)
        return json_response({"status": "ok"})

    @app.get("/v1/models")
    async def models() -> Response:
        catalogue = runtime().models
        listed = list_models(settings.default_model, await catalogue.models())
        if _anthropic_client():
            page = anthropic_model_list(listed["data"], request.args, catalogue.infos)
            return json_response(page)
        return json_response(listed)

    @app.get("/v1/models/<path:model_id>")
    async def model(model_id: str) -> Response:
        catalogue = runtime().models
        found = find_model(model_id, settings.default_model, await catalogue.models())
        if found is None:
            raise ProxyError(
                404,
                f"The model '{model_id}' is not in this proxy's model list.",
                param="model",
                code="model_not_found",
            )
        if _anthropic_client():
            return json_response(anthropic_model(found, catalogue.infos))
        return json_response(found)

    app.register_blueprint(responses_blueprint(responses, keyed, background))
    app.register_blueprint(files_blueprint(files, keyed))

    def wake_poller() -> None:
        if app.batch_poller is not None:
            app.batch_poller.wake()

    def tenant_name() -> str | None:
        found = tenants.directory.lookup(_client_key())
        return found.name if found is not None else None

    def batch_allowed() -> None:
        rt = app.runtime
        if rt is not None and not rt.fleet.has_anthropic:
            # Message Batches live in an Anthropic organisation: no cloud carries them.
            raise ProxyError(
                400,
                "The Batch API runs on Anthropic's Message Batches, which only an anthropic "
                "upstream carries; this gateway's upstreams are all bedrock or vertex ones.",
                type="invalid_request_error",
                code="unsupported_by_upstream",
            )
        found = tenants.directory.lookup(_client_key())
        if found is not None and rt is not None:
            rt.guard.check_budget(found)

    app.register_blueprint(
        batches_blueprint(batches, files, keyed, wake_poller, tenant_name, batch_allowed)
    )

    # Native Message Batches, each owned by the tenant that made it.
    register_anthropic_batches(app, owned=owned, tenants=tenants, runtime=lambda: app.runtime)

    @app.post(RESPONSES_PATH)
    @app.post(MESSAGES_PATH)
    @app.post(COUNT_TOKENS_PATH)
    @app.post(CHAT_PATH)
    async def chat_completions() -> Response:
        # Served by ``ApiEndpoint`` in front of Quart (``edge.endpoint``); registered so
        # that Quart's routing answers the path's other methods with 405 and an Allow header.
        raise RuntimeError(f"POST {CHAT_PATH} reached Quart; it is served by ApiEndpoint")

    @app.get("/visuals/<path:name>")
    async def visuals(name: str) -> Response:
        return await visual_file(name)

    @app.get("/visuals/")
    async def visuals_index() -> Response:
        return await visual_file("index.html")

    @app.get("/dashboard")
    async def dashboard() -> Response:
        # 404 unless metrics are on. No token check: a browser cannot send one on a page
        # load, and the page itself holds no data; it asks for the token the /metrics
        # polls need.
        if runtime().metrics is None:
            raise _metrics_disabled()
        return await visual_file("observability.html")

    def _metrics_viewer() -> str | None:
        """Whose metrics the request may read: None for the whole view, else a tenant name.

        ``METRICS_TOKEN`` opens the whole view. Without client keys (a single-user gateway)
        so does every request, unless a token is set. With keys, a client key opens its
        own tenant's view (``observatory.tenant_view``), whether or not a token is set:
        never another tenant's figures, nor totals that include them.
        """
        key = _client_key()
        token = settings.metrics_token
        if token and key_matches(key, (token,)):
            return None
        directory = tenants.directory
        if directory.auth_required:
            found = directory.lookup(key)
            if found is not None:
                return found.name
        elif not token:
            return None
        if directory.auth_required:
            needed = "a client key (PROXY_API_KEYS or TENANTS_FILE): its tenant's own view" + (
                "; or METRICS_TOKEN: the whole view" if token else ""
            )
        else:
            needed = "METRICS_TOKEN"
        raise ProxyError(
            401,
            f"The metrics endpoints need 'Authorization: Bearer <{needed}>'.",
            type="authentication_error",
            code="invalid_api_key",
            headers={"WWW-Authenticate": "Bearer"},
        )

    def _metrics_disabled() -> ProxyError:
        return ProxyError(
            404, "Metrics are not enabled (set METRICS_ENABLED=1).", code="metrics_disabled"
        )

    def _metrics_runtime() -> tuple[Runtime, str | None]:
        rt = runtime()
        if rt.metrics is None:
            raise _metrics_disabled()
        return rt, _metrics_viewer()

    @app.get("/metrics")
    async def metrics_json() -> Response:
        rt, tenant = _metrics_runtime()
        assert rt.metrics is not None
        no_store = {"Cache-Control": "no-store"}
        if tenant is not None:
            return json_response(rt.metrics.tenant_snapshot(tenant), headers=no_store)
        snapshot = {"view": "gateway", **rt.metrics.snapshot(rt.gauges())}
        snapshot["upstream"] = rt.upstream_statistics()
        snapshot["cluster"] = rt.cluster_statistics()
        snapshot["flex"] = rt.metrics.flex.snapshot(rt.flex_pending())
        if (counted := await batch_status.refresh()) is not None:
            snapshot["batches"] = counted
        snapshot["background"] = background.stats.snapshot()
        snapshot["tracing"] = rt.tracing.statistics()
        return json_response(snapshot, headers=no_store)

    @app.get("/metrics/prometheus")
    async def metrics_prometheus() -> Response:
        rt, tenant = _metrics_runtime()
        assert rt.prometheus is not None
        accept = request.headers.get("Accept")
        if tenant is not None:
            body, content_type = rt.prometheus.render_tenant(tenant, accept)
        else:
            await batch_status.refresh()
            body, content_type = rt.prometheus.render(accept)
        response = Response(body, status=200, content_type=content_type)
        response.headers["Cache-Control"] = "no-store"
        return response

    return app


# OpenAI APIs a client may try by default; their 404 says where to go instead.
_OTHER_OPENAI_APIS: Final = {
    "/v1/completions": "legacy Completions API",
    "/v1/embeddings": "Embeddings API",
    "/v1/assistants": "Assistants API",
}


def _anthropic_client() -> bool:
    """Whether the request speaks Anthropic's dialect (``edge.http.speaks_anthropic``)."""
    return speaks_anthropic(request.scope)


def _error_response(exc: ProxyError) -> Response:
    """A gateway error in the requesting client's dialect."""
    if _anthropic_client():
        status, body, headers = anthropic_error_reply(exc)
        return Response(body, status=status, headers=headers, content_type=_JSON)
    return json_response(exc.body(), exc.status, exc.headers)


def _slug(name: str) -> str:
    return name.lower().replace(" ", "_")
