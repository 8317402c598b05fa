"""One typed, validated settings object, read from the environment and overridable by flags.

Every knob is declared once in ``SPECS``: its environment name (kept from the original
llm-batcher so its users' deployments carry over), its parser, its default and a one-line
description. The environment reader, the CLI flags (``--batch-max-size`` for
``BATCH_MAX_SIZE``) and the documentation check all derive from that table, so a setting
cannot exist in one place and be missing in another.

A bad value raises ``SettingsError`` naming the variable and the problem; the CLI turns it
into one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, final
from urllib.parse import urlsplit

from .observatory.pricing import load_pricing

ANTHROPIC_VERSIONS: Final = ("2023-06-01", "2026-10-21")


@final
class SettingsError(ValueError):
    """A setting has a value we refuse to start with."""

    def __init__(self, name: str, problem: str) -> None:
        super().__init__(f"{name}: {problem}")
        self.name = name
        self.problem = problem


# -- parsers: str -> value, raising ValueError with a short reason ---------------------------


def _model_name(raw: str) -> str:
    value = raw.strip()
    if not value:
        raise ValueError("must name a model (e.g. claude-sonnet-4-5)")
    if not value.isprintable() or any(c.isspace() for c in value):
        raise ValueError("must be a model id: no spaces or control characters")
    return value


def _optional_str(raw: str) -> str | None:
    return raw.strip() or None


def _header_secret(raw: str) -> str | None:
    """A key sent as an HTTP header: printable ASCII. The value is never put in the error."""
    value = raw.strip()
    if value and not (value.isascii() and value.isprintable()):
        raise ValueError("must be printable ASCII (it is sent as an HTTP header); value not shown")
    return value or None


def _bool(raw: str) -> bool:
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"expected a boolean (1/0, true/false, yes/no, on/off), got {raw!r}")


def _int(minimum: int) -> Callable[[str], int]:
    def parse(raw: str) -> int:
        try:
            value = int(raw.strip())
        except ValueError:
            raise ValueError(f"expected an integer, got {raw!r}") from None
        if value < minimum:
            raise ValueError(f"must be >= {minimum}, got {value}")
        return value

    return parse


def _float(minimum: float, *, strict: bool = False) -> Callable[[str], float]:
    def parse(raw: str) -> float:
        try:
            value = float(raw.strip())
        except ValueError:
            raise ValueError(f"expected a number, got {raw!r}") from None
        if math.isnan(value) or math.isinf(value):
            raise ValueError(f"expected a finite number, got {raw!r}")
        if value < minimum or (strict and value == minimum):
            relation = ">" if strict else ">="
            raise ValueError(f"must be {relation} {minimum:g}, got {value:g}")
        return value

    return parse


def _url(raw: str) -> str:
    value = raw.strip().rstrip("/")
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 -- raises ValueError on a bad port
    except ValueError as exc:
        raise ValueError(f"not a valid URL ({exc}): {raw!r}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"expected an http(s) URL like https://api.anthropic.com, got {raw!r}")
    if parts.query or parts.fragment:
        raise ValueError(f"the base URL must not have a query or fragment, got {raw!r}")
    return value


def _version(raw: str) -> str:
    value = raw.strip()
    if value not in ANTHROPIC_VERSIONS:
        raise ValueError(f"expected one of {', '.join(ANTHROPIC_VERSIONS)}, got {raw!r}")
    return value


def _csv(raw: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in raw.split(",") if item.strip())


def _header_secrets(raw: str) -> tuple[str, ...]:
    """Comma-separated keys clients send in a header: each printable ASCII (not shown)."""
    keys = _csv(raw)
    if not all(key.isascii() and key.isprintable() for key in keys):
        raise ValueError("keys must be printable ASCII (clients send them in a header); not shown")
    return keys


def _origins(raw: str) -> tuple[str, ...]:
    """Web origins, spelled as browsers send them: ``scheme://host[:port]``, ``null`` or ``*``.

    Normalised so that a listed origin can match: lower case, no default port
    (``https://x:443`` is sent as ``https://x``), international host names in punycode.
    Anything a browser never sends (a path, a wildcard inside a name) is refused here rather
    than silently never matching.
    """
    origins = []
    for item in _csv(raw):
        value = item.rstrip("/").lower()
        if value in ("*", "null"):
            origins.append(value)
            continue
        try:
            parts = urlsplit(value)
            port = parts.port
        except ValueError:
            parts, port = None, None
        if (
            parts is None
            or not parts.scheme
            or not parts.hostname
            or parts.path
            or parts.query
            or parts.fragment
            or parts.username is not None
            or "*" in value
        ):
            raise ValueError(
                f"expected origins like https://chat.example.com or http://localhost:3000 "
                f"(scheme, host and port only; no wildcards but a lone '*'), 'null' or '*', "
                f"got {item!r}"
            )
        scheme, host = parts.scheme, parts.hostname
        try:
            host = f"[{host}]" if ":" in host else host.encode("idna").decode("ascii")
        except UnicodeError:
            raise ValueError(f"not a valid host name in {item!r}") from None
        if port is not None and str(port) != _DEFAULT_PORTS.get(scheme):
            host = f"{host}:{port}"
        origins.append(f"{scheme}://{host}")
    return tuple(origins)


_DEFAULT_PORTS: Final = {"http": "80", "https": "443"}


def _path(raw: str) -> str | None:
    value = raw.strip()
    if not value:
        return None
    if not os.path.isfile(value):
        raise ValueError(f"no such file: {value!r}")
    return value


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


_MIB: Final = 1024 * 1024

SPECS: Final[tuple[SettingSpec, ...]] = (
    SettingSpec(
        "ANTHROPIC_API_KEY",
        "anthropic_api_key",
        _header_secret,
        None,
        "Key for the upstream Messages API. Never logged or echoed.",
        secret=True,
    ),
    SettingSpec(
        "ANTHROPIC_BASE_URL",
        "anthropic_base_url",
        _url,
        "https://api.anthropic.com",
        "Upstream base URL; the proxy posts to {base}/v1/messages.",
    ),
    SettingSpec(
        "ANTHROPIC_VERSION",
        "anthropic_version",
        _version,
        "2023-06-01",
        "anthropic-version header sent upstream (2023-06-01 or 2026-10-21).",
    ),
    SettingSpec(
        "DEFAULT_MODEL",
        "default_model",
        _model_name,
        "claude-sonnet-4-5",
        'Model used when a request asks for model "default"; listed first by /v1/models.',
    ),
    SettingSpec(
        "DEFAULT_MAX_TOKENS",
        "default_max_tokens",
        _int(1),
        4096,
        "max_tokens sent upstream when the request sets neither max_completion_tokens nor max_tokens.",
    ),
    SettingSpec(
        "REQUEST_TIMEOUT_S",
        "request_timeout_s",
        _float(0, strict=True),
        600.0,
        "Deadline for one request, from its arrival (queueing included); exceeding it answers 504.",
    ),
    SettingSpec(
        "BATCH_ENABLED",
        "batch_enabled",
        _bool,
        False,
        "Admission windows on (1) or the direct path (0).",
    ),
    SettingSpec(
        "BATCH_MAX_SIZE",
        "batch_max_size",
        _int(1),
        16,
        "A window flushes when it holds this many requests.",
    ),
    SettingSpec(
        "BATCH_MAX_WAIT_MS",
        "batch_max_wait_ms",
        _float(0),
        10.0,
        "A window flushes this long after its first request, if it has not filled.",
    ),
    SettingSpec(
        "BATCH_MAX_CONCURRENCY",
        "batch_max_concurrency",
        _int(1),
        16,
        "Upstream calls in flight at once (streams hold their slot until they end).",
    ),
    SettingSpec(
        "BATCH_TIMEOUT_S",
        "batch_timeout_s",
        _float(0, strict=True),
        600.0,
        "A flushed window's deadline; requests still pending then get 504.",
    ),
    SettingSpec(
        "UPSTREAM_MAX_RETRIES",
        "upstream_max_retries",
        _int(0),
        2,
        "Retries of a failed upstream call before anything reaches the client (0 = off).",
    ),
    SettingSpec(
        "UPSTREAM_RETRY_MAX_WAIT_S",
        "upstream_retry_max_wait_s",
        _float(0),
        60.0,
        "Longest upstream retry-after honoured; longer ones are answered at once, and no cooldown lasts longer.",
    ),
    SettingSpec(
        "RETRY_BUDGET_RATIO",
        "retry_budget_ratio",
        _float(0),
        0.1,
        "Retries allowed per request over the last 10 s (plus 2), so retries can't amplify an outage.",
    ),
    SettingSpec(
        "UPSTREAM_COORDINATED_BACKOFF",
        "upstream_coordinated_backoff",
        _bool,
        True,
        "Share an upstream 429/529 retry-after or an exhausted rate limit: no new upstream call starts until it passes.",
    ),
    SettingSpec(
        "BATCH_ADAPTIVE",
        "batch_adaptive",
        _bool,
        False,
        "AIMD on upstream concurrency within [1, BATCH_MAX_CONCURRENCY]; needs BATCH_ENABLED=1.",
    ),
    SettingSpec(
        "METRICS_ENABLED",
        "metrics_enabled",
        _bool,
        False,
        "Collect metrics and serve /metrics and /metrics/prometheus (404 when off).",
    ),
    SettingSpec(
        "METRICS_LATENCY_WINDOW",
        "metrics_latency_window",
        _int(0),
        1024,
        "Recent samples kept for percentiles, clamped to [1, 100000].",
    ),
    SettingSpec(
        "METRICS_TOKEN",
        "metrics_token",
        _header_secret,
        None,
        "When set, the metrics endpoints require 'Authorization: Bearer <token>'.",
        secret=True,
    ),
    SettingSpec(
        "PRICING_FILE",
        "pricing_file",
        _path,
        None,
        "A JSON price table replacing the bundled one (same format).",
    ),
    SettingSpec(
        "MAX_INFLIGHT",
        "max_inflight",
        _int(0),
        0,
        "Requests processed at once; 0 turns the admission gate off.",
    ),
    SettingSpec(
        "MAX_QUEUE",
        "max_queue",
        _int(0),
        64,
        "Requests allowed to wait for a slot when MAX_INFLIGHT is reached; more are shed (429).",
    ),
    SettingSpec(
        "ACQUIRE_TIMEOUT_S",
        "acquire_timeout_s",
        _float(0),
        5.0,
        "How long a queued request waits for a slot before it is shed (429).",
    ),
    SettingSpec(
        "RETRY_AFTER_S",
        "retry_after_s",
        _int(0),
        1,
        "Retry-After seconds sent with a shed request's 429.",
    ),
    SettingSpec(
        "SHUTDOWN_GRACE_S",
        "shutdown_grace_s",
        _float(0),
        30.0,
        "On SIGTERM/SIGINT, how long in-flight requests and streams may finish.",
    ),
    SettingSpec(
        "KEEPALIVE_TIMEOUT_S",
        "keepalive_timeout_s",
        _float(0, strict=True),
        5.0,
        "How long an idle client connection stays open (raise it above a load balancer's "
        "idle timeout).",
    ),
    SettingSpec(
        "PROXY_API_KEYS",
        "proxy_api_keys",
        _header_secrets,
        (),
        "Comma-separated keys clients must send ('Authorization: Bearer <key>', 'api-key' or "
        "'x-api-key'); empty = no auth.",
        secret=True,
    ),
    SettingSpec(
        "CORS_ALLOW_ORIGINS",
        "cors_allow_origins",
        _origins,
        (),
        "Comma-separated web origins whose pages may call the gateway (CORS), or '*'; requests naming another origin get 403.",
    ),
    SettingSpec(
        "MAX_BODY_BYTES",
        "max_body_bytes",
        _int(1),
        32 * _MIB,
        "Largest request body accepted (413 above it); 32 MiB matches the upstream's limit.",
    ),
)


@final
@dataclass(frozen=True)
class Settings:
    """Validated configuration; build with ``Settings.from_env()`` or ``Settings()``."""

    anthropic_api_key: str | None = None
    anthropic_base_url: str = "https://api.anthropic.com"
    anthropic_version: str = "2023-06-01"
    default_model: str = "claude-sonnet-4-5"
    default_max_tokens: int = 4096
    request_timeout_s: float = 600.0
    batch_enabled: bool = False
    batch_max_size: int = 16
    batch_max_wait_ms: float = 10.0
    batch_max_concurrency: int = 16
    batch_timeout_s: float = 600.0
    upstream_max_retries: int = 2
    upstream_retry_max_wait_s: float = 60.0
    retry_budget_ratio: float = 0.1
    upstream_coordinated_backoff: bool = True
    batch_adaptive: bool = False
    metrics_enabled: bool = False
    metrics_latency_window: int = 1024
    metrics_token: str | None = dataclasses.field(default=None, repr=False)
    pricing_file: str | None = None
    max_inflight: int = 0
    max_queue: int = 64
    acquire_timeout_s: float = 5.0
    retry_after_s: int = 1
    shutdown_grace_s: float = 30.0
    keepalive_timeout_s: float = 5.0
    proxy_api_keys: tuple[str, ...] = dataclasses.field(default=(), repr=False)
    cors_allow_origins: tuple[str, ...] = ()
    max_body_bytes: int = 32 * _MIB

    def __repr__(self) -> str:
        # Secrets never reach a log line, even through repr().
        shown = []
        for spec in SPECS:
            value = getattr(self, spec.field)
            if spec.secret and value:
                value = "<redacted>"
            shown.append(f"{spec.field}={value!r}")
        return f"Settings({', '.join(shown)})"

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] | None = None, overrides: Mapping[str, str] | None = None
    ) -> Settings:
        """Read every setting from ``environ`` (default ``os.environ``), then ``overrides``.

        ``overrides`` maps environment names to raw strings (what CLI flags produce), so
        both sources go through the same parser and the same error messages.

        Raises:
          SettingsError: naming the first variable with a bad value.
        """
        environ = os.environ if environ is None else environ
        merged = {**{k: v for k, v in environ.items() if k in _BY_ENV}, **(overrides or {})}
        values: dict[str, Any] = {}
        for env, raw in merged.items():
            spec = _BY_ENV[env]
            try:
                values[spec.field] = spec.parse(raw)
            except ValueError as exc:
                raise SettingsError(env, str(exc)) from None
        settings = cls(**values)
        settings.check()
        return settings

    def check(self) -> None:
        """Rules that involve more than one setting.

        Raises:
          SettingsError: naming the setting that cannot be honoured.
        """
        if self.pricing_file is not None:
            try:
                load_pricing(self.pricing_file)
            except ValueError as exc:
                raise SettingsError("PRICING_FILE", str(exc)) from None
        if self.batch_adaptive and not self.batch_enabled:
            raise SettingsError(
                "BATCH_ADAPTIVE",
                "adapts the admission windows' concurrency; set BATCH_ENABLED=1 too",
            )

    def replace(self, **changes: Any) -> Settings:
        return dataclasses.replace(self, **changes)

    @property
    def batch_max_wait_s(self) -> float:
        return self.batch_max_wait_ms / 1000.0


_BY_ENV: Final = {spec.env: spec for spec in SPECS}


def _check_specs_match_fields() -> None:
    fields = {f.name: f for f in dataclasses.fields(Settings)}
    for spec in SPECS:
        field = fields.get(spec.field)
        if field is None or field.default != spec.default:
            raise AssertionError(f"SPECS and Settings disagree on {spec.env}")
    if len(fields) != len(SPECS):
        raise AssertionError("every Settings field needs a SettingSpec")


_check_specs_match_fields()
