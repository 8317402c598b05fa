"""One typed, validated settings object, read from the environment and overridable by flags.

Every knob is declared once in ``SPECS``: its environment name (kept from the original
llm-batcher so its users' deployments carry over), its parser, its default and a one-line
description. The environment reader, the CLI flags (``--batch-max-size`` for
``BATCH_MAX_SIZE``) and the documentation check all derive from that table, so a setting
cannot exist in one place and be missing in another. The table is ``_specs``, the
parsers it names are ``_parsers``; this module is the typed object built from them,
its cross-setting rules and the public face (``SPECS`` and ``SettingSpec`` re-exported).

A bad value raises ``SettingsError`` naming the variable and the problem; the CLI turns it
into one line on stderr and exit code 2, never a traceback.

Settings are data: paths and values, checked as values. The files they name (``PRICING_FILE``,
``TENANTS_FILE``) are read by the app's composition root (``runtime.check_files`` before
serving, then the runtime itself), so this module imports no other part of the gateway.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, final

from ._parsers import ANTHROPIC_VERSIONS as ANTHROPIC_VERSIONS
from ._specs import MIB
from ._specs import SPECS as SPECS
from ._specs import SettingSpec as SettingSpec


@final
class SettingsError(ValueError):
    """A setting has a value we refuse to start with."""

    def __init__(self, name: str, problem: str) -> None:
        super().__init__(f"{name}: {problem}")
        self.name = name
        self.problem = problem


@final
@dataclass(frozen=True)
class Settings:
    """Validated configuration; build with ``Settings.from_env()`` or ``Settings()``."""

    anthropic_api_key: str | None = None
    anthropic_base_url: str = "https://api.anthropic.com"
    anthropic_version: str = "2023-06-01"
    default_model: str = "claude-sonnet-5-5"
    default_max_tokens: int = 4096
    request_timeout_s: float = 600.0
    body_read_timeout_s: float = 30.0
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
    lanes_enabled: bool = True
    lane_deferrable_share: float = 0.2
    retry_after_s: int = 1
    shutdown_grace_s: float = 30.0
    keepalive_timeout_s: float = 5.0
    heap_trim_interval_s: float = 30.0
    data_dir: str | None = None
    deployment_id: str | None = None
    responses_retention_days: float = 30.0
    background_max_running: int = 64
    background_max_queued: int = 1000
    background_stream_buffer_bytes: int = 4 * 1024 * 1024
    batch_retention_days: float = 30.0
    batch_file_max_requests: int = 50_000
    batch_poll_concurrency: int = 4
    flex_window_size: int = 100
    flex_window_s: float = 2.0
    flex_max_wait_s: float = 300.0
    flex_on_timeout: str = "realtime"
    flex_max_pending: int = 1000
    redis_url: str | None = dataclasses.field(default=None, repr=False)
    redis_key_prefix: str = "trio-batcher:"
    redis_lease_ttl_s: float = 5.0
    redis_timeout_s: float = 0.5
    redis_failure: str = "share"
    proxy_api_keys: tuple[str, ...] = dataclasses.field(default=(), repr=False)
    tenants_file: str | None = None
    upstreams_file: str | None = None
    upstream_affinity: bool = True
    cors_allow_origins: tuple[str, ...] = ()
    allowed_hosts: tuple[str, ...] = ()
    max_body_bytes: int = 32 * MIB
    log_format: str = "text"

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
        """Rules that involve more than one setting (the files settings name are read by
        ``runtime.check_files``).

        Raises:
          SettingsError: naming the setting that cannot be honoured.
        """
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
