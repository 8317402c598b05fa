"""The table of knobs: every setting declared once, with its name, parser, default and doc.

``SPECS`` is the single source the environment reader, the CLI flags and the documentation
check derive from, so a setting cannot exist in one place and be missing in another. The
environment names are kept from the original llm-batcher so its users' deployments carry
over. ``Settings`` (in ``_model``) repeats each default as a typed field; an import-time
check there fails if the two ever disagree.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from . import _parsers as parsers


@dataclass(frozen=True)
class SettingSpec:
    env: str
    field: str
    parse: Callable[[str], Any]
    default: Any
    doc: str
    secret: bool = False

    @property
    def flag(self) -> str:
        return "--" + self.env.lower().replace("_", "-")


MIB: Final = 1024 * 1024

SPECS: Final[tuple[SettingSpec, ...]] = (
    SettingSpec(
        "ANTHROPIC_API_KEY",
        "anthropic_api_key",
        parsers.header_secret,
        None,
        "Key for the upstream Messages API. Never logged or echoed.",
        secret=True,
    ),
    SettingSpec(
        "ANTHROPIC_BASE_URL",
        "anthropic_base_url",
        parsers.base_url,
        "https://api.anthropic.com",
        "Upstream base URL; the proxy posts to {base}/v1/messages.",
    ),
    SettingSpec(
        "ANTHROPIC_VERSION",
        "anthropic_version",
        parsers.anthropic_version,
        "2023-06-01",
        "anthropic-version header sent upstream (2023-06-01 or 2026-10-21).",
    ),
    SettingSpec(
        "DEFAULT_MODEL",
        "default_model",
        parsers.model_name,
        "claude-sonnet-5-5",
        'Model used when a request asks for model "default"; listed first by /v1/models.',
    ),
    SettingSpec(
        "DEFAULT_MAX_TOKENS",
        "default_max_tokens",
        parsers.integer(1),
        4096,
        "max_tokens sent upstream when the request sets neither max_completion_tokens nor max_tokens.",
    ),
    SettingSpec(
        "REQUEST_TIMEOUT_S",
        "request_timeout_s",
        parsers.number(0, strict=True),
        600.0,
        "Deadline for one request, from its arrival (queueing included); exceeding it answers 504.",
    ),
    SettingSpec(
        "BODY_READ_TIMEOUT_S",
        "body_read_timeout_s",
        parsers.number(0, strict=True),
        30.0,
        "Each span this long spent waiting for a request body must bring 64 KiB (or the "
        "body's end); a slower body gets 408 and its connection is closed.",
    ),
    SettingSpec(
        "BATCH_ENABLED",
        "batch_enabled",
        parsers.boolean,
        False,
        "Admission windows on (1) or the direct path (0).",
    ),
    SettingSpec(
        "BATCH_MAX_SIZE",
        "batch_max_size",
        parsers.integer(1),
        16,
        "A window flushes when it holds this many requests.",
    ),
    SettingSpec(
        "BATCH_MAX_WAIT_MS",
        "batch_max_wait_ms",
        parsers.number(0),
        10.0,
        "A window flushes this long after its first request, if it has not filled.",
    ),
    SettingSpec(
        "BATCH_MAX_CONCURRENCY",
        "batch_max_concurrency",
        parsers.integer(1),
        16,
        "Upstream calls in flight at once (streams hold their slot until they end).",
    ),
    SettingSpec(
        "BATCH_TIMEOUT_S",
        "batch_timeout_s",
        parsers.number(0, strict=True),
        600.0,
        "A flushed window's deadline; requests still pending then get 504.",
    ),
    SettingSpec(
        "UPSTREAM_MAX_RETRIES",
        "upstream_max_retries",
        parsers.integer(0),
        2,
        "Retries of a failed upstream call before anything reaches the client (0 = off).",
    ),
    SettingSpec(
        "UPSTREAM_RETRY_MAX_WAIT_S",
        "upstream_retry_max_wait_s",
        parsers.number(0),
        60.0,
        "Longest upstream retry-after honoured; longer ones are answered at once, and no cooldown lasts longer.",
    ),
    SettingSpec(
        "RETRY_BUDGET_RATIO",
        "retry_budget_ratio",
        parsers.number(0),
        0.1,
        "Retries allowed per request over the last 10 s (plus 2), so retries can't amplify an outage.",
    ),
    SettingSpec(
        "UPSTREAM_COORDINATED_BACKOFF",
        "upstream_coordinated_backoff",
        parsers.boolean,
        True,
        "Share an upstream 429/529 retry-after or an exhausted rate limit: no new upstream call starts until it passes.",
    ),
    SettingSpec(
        "BATCH_ADAPTIVE",
        "batch_adaptive",
        parsers.boolean,
        False,
        "AIMD on upstream concurrency within [1, BATCH_MAX_CONCURRENCY]; needs BATCH_ENABLED=1.",
    ),
    SettingSpec(
        "METRICS_ENABLED",
        "metrics_enabled",
        parsers.boolean,
        False,
        "Collect metrics and serve /metrics and /metrics/prometheus (404 when off).",
    ),
    SettingSpec(
        "METRICS_LATENCY_WINDOW",
        "metrics_latency_window",
        parsers.integer(0),
        1024,
        "Recent samples kept for percentiles, clamped to [1, 100000].",
    ),
    SettingSpec(
        "METRICS_TOKEN",
        "metrics_token",
        parsers.header_secret,
        None,
        "When set, the metrics endpoints require 'Authorization: Bearer <token>'.",
        secret=True,
    ),
    SettingSpec(
        "PRICING_FILE",
        "pricing_file",
        parsers.file_path,
        None,
        "A JSON price table replacing the bundled one (same format).",
    ),
    SettingSpec(
        "MAX_INFLIGHT",
        "max_inflight",
        parsers.integer(0),
        0,
        "Requests processed at once; 0 turns the admission gate off.",
    ),
    SettingSpec(
        "MAX_QUEUE",
        "max_queue",
        parsers.integer(0),
        64,
        "Requests allowed to wait for a slot when MAX_INFLIGHT is reached; more are shed (429).",
    ),
    SettingSpec(
        "ACQUIRE_TIMEOUT_S",
        "acquire_timeout_s",
        parsers.number(0),
        5.0,
        "How long a queued request waits for a slot before it is shed (429).",
    ),
    SettingSpec(
        "LANES_ENABLED",
        "lanes_enabled",
        parsers.boolean,
        True,
        "Priority lanes: interactive requests are admitted ahead of deferrable ones (background, flex falling back to realtime) when the gate or the upstream cap is full.",
    ),
    SettingSpec(
        "LANE_DEFERRABLE_SHARE",
        "lane_deferrable_share",
        parsers.share,
        0.2,
        "The least share of contended admissions that go to deferrable requests, in (0, 0.5]: they are slowed, never starved.",
    ),
    SettingSpec(
        "RETRY_AFTER_S",
        "retry_after_s",
        parsers.integer(0),
        1,
        "Retry-After seconds sent with a shed request's 429.",
    ),
    SettingSpec(
        "SHUTDOWN_GRACE_S",
        "shutdown_grace_s",
        parsers.number(0),
        30.0,
        "On SIGTERM/SIGINT, how long in-flight requests and streams may finish.",
    ),
    SettingSpec(
        "KEEPALIVE_TIMEOUT_S",
        "keepalive_timeout_s",
        parsers.number(0, strict=True),
        5.0,
        "How long an idle client connection stays open (raise it above a load balancer's "
        "idle timeout).",
    ),
    SettingSpec(
        "HEAP_TRIM_INTERVAL_S",
        "heap_trim_interval_s",
        parsers.number(0),
        30.0,
        "How often the process considers collecting garbage in reference cycles (a full "
        "collection, run when the requests finished since the last one are a quarter of "
        "those open, or every 16th interval) and handing free heap pages back to the "
        "kernel (glibc's malloc_trim); 0 = never.",
    ),
    SettingSpec(
        "DATA_DIR",
        "data_dir",
        parsers.optional_str,
        None,
        "Directory for embedded state (stored Responses, batch files, batches), created "
        "mode 0700 on first use; unset = $XDG_DATA_HOME/trio-batcher, else "
        "~/.local/share/trio-batcher.",
    ),
    SettingSpec(
        "DEPLOYMENT_ID",
        "deployment_id",
        parsers.deployment_id,
        None,
        "The namespace of this gateway's state in DATA_DIR; unset = the upstream's "
        "identity (ANTHROPIC_BASE_URL and a fingerprint of ANTHROPIC_API_KEY). Set it to "
        "keep a deployment's batches and responses across a key rotation (a name, or the id "
        "logged at startup).",
    ),
    SettingSpec(
        "RESPONSES_RETENTION_DAYS",
        "responses_retention_days",
        parsers.number(0, strict=True),
        30.0,
        "How long a stored Response (store: true) can be retrieved or continued by "
        "previous_response_id; expired ones are purged.",
    ),
    SettingSpec(
        "BACKGROUND_MAX_RUNNING",
        "background_max_running",
        parsers.integer(1),
        64,
        "Background responses (Responses API, background: true) one process runs at once; "
        "the others wait, queued.",
    ),
    SettingSpec(
        "BACKGROUND_MAX_QUEUED",
        "background_max_queued",
        parsers.integer(0),
        1000,
        "Background responses that may wait for a run slot; past it a new one is a 429.",
    ),
    SettingSpec(
        "BACKGROUND_STREAM_BUFFER_BYTES",
        "background_stream_buffer_bytes",
        parsers.integer(1024),
        4 * 1024 * 1024,
        "Events a streamed background response keeps for resuming (starting_after), in "
        "bytes; the oldest are dropped past it.",
    ),
    SettingSpec(
        "BATCH_RETENTION_DAYS",
        "batch_retention_days",
        parsers.number(0, strict=True),
        30.0,
        "How long a finished batch (OpenAI Batch API) and its input, output and error files "
        "are kept after it ends; then they are purged.",
    ),
    SettingSpec(
        "BATCH_FILE_MAX_REQUESTS",
        "batch_file_max_requests",
        parsers.integer(1),
        50_000,
        "Requests a Batch API input file may hold (OpenAI's limit by default; up to "
        "Anthropic's 100,000 per Message Batch and beyond, split across several).",
    ),
    SettingSpec(
        "BATCH_POLL_CONCURRENCY",
        "batch_poll_concurrency",
        parsers.integer(1),
        4,
        "Batches (OpenAI Batch API) one process steps at once: a large one's delivery never "
        "holds up the others; each step holds a page of lines and a 1 MiB buffer.",
    ),
    SettingSpec(
        "FLEX_WINDOW_SIZE",
        "flex_window_size",
        parsers.integer(1),
        100,
        'A flex window (requests with service_tier "flex") is sent as one Message Batch '
        "when it holds this many requests.",
    ),
    SettingSpec(
        "FLEX_WINDOW_S",
        "flex_window_s",
        parsers.number(0),
        2.0,
        "A flex window is sent this long after its first request joined, if not full.",
    ),
    SettingSpec(
        "FLEX_MAX_WAIT_S",
        "flex_max_wait_s",
        parsers.number(0, strict=True),
        300.0,
        "How long a flex request waits for its batch's result, from its arrival; past it, "
        "FLEX_ON_TIMEOUT applies.",
    ),
    SettingSpec(
        "FLEX_ON_TIMEOUT",
        "flex_on_timeout",
        parsers.one_of("realtime", "error"),
        "realtime",
        "A flex wait that ran out (or a batch that failed): 'realtime' = sent as a normal "
        "call at full price (the reply says service_tier default); 'error' = 429 "
        "resource_unavailable.",
    ),
    SettingSpec(
        "FLEX_MAX_PENDING",
        "flex_max_pending",
        parsers.integer(0),
        1000,
        "Flex requests waiting at once (windows and batches); more get 429 "
        "resource_unavailable. 0 = no flex: served realtime, service_tier named as ignored.",
    ),
    SettingSpec(
        "REDIS_URL",
        "redis_url",
        parsers.redis_url,
        None,
        "Shared state for several instances (redis://host:6379/0): with BATCH_ENABLED, the "
        "upstream cap and cooldowns become global; unset = per process. Never logged.",
        secret=True,
    ),
    SettingSpec(
        "REDIS_KEY_PREFIX",
        "redis_key_prefix",
        parsers.key_prefix,
        "trio-batcher:",
        "Prefix of every Redis key, so several clusters can share one Redis.",
    ),
    SettingSpec(
        "REDIS_LEASE_TTL_S",
        "redis_lease_ttl_s",
        parsers.number(0.5),
        5.0,
        "How long an upstream slot of a process that died stays taken (leases are renewed "
        "every third of it while a call runs).",
    ),
    SettingSpec(
        "REDIS_TIMEOUT_S",
        "redis_timeout_s",
        parsers.number(0.01),
        0.5,
        "Deadline of every Redis command; past it the instance falls back (REDIS_FAILURE).",
    ),
    SettingSpec(
        "REDIS_FAILURE",
        "redis_failure",
        parsers.one_of("share", "closed"),
        "share",
        "When Redis is down: 'share' = each instance takes its share of the cap (cap / "
        "instances last seen alive) and local cooldowns; 'closed' = no upstream call until "
        "Redis answers (503).",
    ),
    SettingSpec(
        "PROXY_API_KEYS",
        "proxy_api_keys",
        parsers.header_secrets,
        (),
        "Comma-separated keys clients must send ('Authorization: Bearer <key>', 'api-key' or "
        "'x-api-key'); empty = no auth.",
        secret=True,
    ),
    SettingSpec(
        "TENANTS_FILE",
        "tenants_file",
        parsers.file_path,
        None,
        "A TOML file of tenants (keys as SHA-256 digests, weights, rate limits, budgets, "
        "models); reloaded on SIGHUP or when it changes. `trio-batcher keys add` edits it.",
    ),
    SettingSpec(
        "UPSTREAMS_FILE",
        "upstreams_file",
        parsers.file_path,
        None,
        "A TOML file of upstreams (one [[upstream]] table per Anthropic, Bedrock or Vertex AI "
        "deployment: kind, caps, weights, priorities, model ids), routed among with "
        "failover and cache affinity (docs/upstreams.md); unset = one Anthropic upstream, "
        "ANTHROPIC_BASE_URL.",
    ),
    SettingSpec(
        "UPSTREAM_AFFINITY",
        "upstream_affinity",
        parsers.boolean,
        True,
        "With several upstreams, send each conversation's turns back to the upstream that "
        "served it (its prompt cache is there); off = every request by weight.",
    ),
    SettingSpec(
        "CORS_ALLOW_ORIGINS",
        "cors_allow_origins",
        parsers.web_origins,
        (),
        "Comma-separated web origins whose pages may call the gateway (CORS), or '*'; requests naming another origin get 403.",
    ),
    SettingSpec(
        "ALLOWED_HOSTS",
        "allowed_hosts",
        parsers.host_names,
        (),
        "Comma-separated host names (or '*') a gateway without client keys serves stored files, "
        "batches and responses under, besides localhost, 127.0.0.0/8 and [::1]; other Host "
        "headers get 403 there.",
    ),
    SettingSpec(
        "MAX_BODY_BYTES",
        "max_body_bytes",
        parsers.integer(1),
        32 * MIB,
        "Largest request body accepted (413 above it); 32 MiB matches the upstream's limit.",
    ),
    SettingSpec(
        "LOG_FORMAT",
        "log_format",
        parsers.one_of("text", "json"),
        "text",
        "Log lines as 'text' or 'json' (one object a line, with the trace id when tracing "
        "is on), for every logger of the process, hypercorn's included.",
    ),
)
