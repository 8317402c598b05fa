"""Settings of the simulated Anthropic upstream."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Final, final

API_VERSIONS: Final = frozenset({"2023-06-01", "2026-10-21"})
"""``anthropic-version`` values the simulator accepts; anything else is a 400."""

MAX_REQUEST_BYTES: Final = 32 * 1024 * 1024
"""Anthropic's request size limit (32 MiB); larger bodies are a 413 ``request_too_large``."""


@final
@dataclass(frozen=True, slots=True)
class SimulatorConfig:
    """How the simulated upstream behaves.

    Every random choice (latency jitter, fault draws) comes from one RNG seeded with
    ``seed`` and advanced once per request, so a run with the same requests in the same
    order behaves the same. Reply *content* does not depend on that RNG: it is derived from
    the request itself, so the same request always gets the same reply.

    Attributes:
      ttft_ms: time to the first output token, in milliseconds.
      tokens_per_s: output rate after the first token; 0 emits the rest at once.
      jitter: fractional latency jitter: each delay is scaled by ``1 + jitter * u`` with
        ``u`` uniform in [-1, 1].
      seed: seeds the latency/fault RNG and is mixed into reply content.
      error_rate: fraction of requests answered with 500 ``api_error``.
      rate_429: fraction answered with 429 ``rate_limit_error``.
      rate_529: fraction answered with 529 ``overloaded_error``.
      retry_after_s: the ``retry-after`` (seconds) sent with 429 and 529.
      api_keys: accepted API keys; empty accepts any non-empty key.
      reply_tokens: length of a text reply in tokens (capped by ``max_tokens``).
      max_request_bytes: bodies above this are refused with 413.
      cache_entries: capacity of the prompt-cache LRU.
      rpm_limit: enforced requests per period (a continuously refilling token bucket, see
        ``ratelimit.py``); a request finding it empty gets 429 ``rate_limit_error`` with an
        honest ``retry-after``. ``None``: unlimited.
      tpm_limit: enforced input + output tokens per period, the same way. ``None``:
        unlimited.
      ratelimit_period_s: the period of both limits: an empty bucket is full again after
        this long. 60 (a minute) is Anthropic's; tests shorten it.
      overload_every_s: start an overload window (every request answered 529
        ``overloaded_error``) this often, counting from the first request; 0 for a single
        window at the start (see ``overload.py``).
      overload_for_s: length of each overload window; 0 means never overloaded.
      request_log_entries: how many received requests ``GET /_sim/requests`` keeps (the
        newest); 0 keeps none.
      batch_processing_s: how long a new Message Batch waits before its first request is
        processed (``batches.py``).
      batch_request_s: how long each request of a batch takes; a batch's requests are
        processed one after another.
      batch_expiry_s: a batch still processing this long after its creation ends, its
        unprocessed requests ``expired`` (the real API's 24 hours by default).
      batch_entries: how many Message Batches are kept; creating one more forgets the
        oldest ended batch, and with none ended, is refused with 429.
      aws_access_key_id, aws_secret_access_key, aws_region: the one AWS identity the
        simulated Bedrock (``bedrock_route.py``) knows: it recomputes each request's SigV4
        signature with them (service ``bedrock``, this region). The defaults are
        placeholders a test or ``serve --simulate`` gives its client.
      aws_clock_skew_s: a SigV4 ``X-Amz-Date`` further than this from now is refused
        (AWS allows 5 minutes).
      bedrock_api_keys: Bedrock API keys (``Authorization: Bearer``, the SDK's ``api_key``
        / ``AWS_BEARER_TOKEN_BEDROCK``) accepted instead of a signature.
      vertex_project: the Google Cloud project the simulated Vertex AI serves; another
        project is a 403 ``PERMISSION_DENIED``.
      vertex_region: the only region served; ``None`` serves any.
      vertex_client_email, vertex_public_key_pem: the service account whose signed JWT
        assertions ``POST /token`` exchanges for access tokens (``google_tokens.py``);
        without a key no assertion is accepted.
      vertex_token_lifetime_s: how long an access token lives (``expires_in``); tests
        shorten it to see an expired token refused.
    """

    ttft_ms: float = 0
    tokens_per_s: float = 0
    jitter: float = 0.0
    seed: int = 0
    error_rate: float = 0
    rate_429: float = 0
    rate_529: float = 0
    retry_after_s: float = 1
    api_keys: frozenset[str] = field(default_factory=frozenset)
    reply_tokens: int = 24
    max_request_bytes: int = MAX_REQUEST_BYTES
    cache_entries: int = 1024
    rpm_limit: int | None = None
    tpm_limit: int | None = None
    ratelimit_period_s: float = 60.0
    overload_every_s: float = 0
    overload_for_s: float = 0
    request_log_entries: int = 64
    batch_processing_s: float = 0
    batch_request_s: float = 0
    batch_expiry_s: float = 24 * 3600.0
    batch_entries: int = 100
    aws_access_key_id: str = "AKIASIMULATEDBEDROCK"
    aws_secret_access_key: str = "simulated-bedrock-secret-key"
    aws_region: str = "us-east-1"
    aws_clock_skew_s: float = 300.0
    bedrock_api_keys: frozenset[str] = field(default_factory=frozenset)
    vertex_project: str = "simulated-project"
    vertex_region: str | None = None
    vertex_client_email: str | None = None
    vertex_public_key_pem: str | None = None
    vertex_token_lifetime_s: float = 3600.0

    def __post_init__(self) -> None:
        for name in ("ttft_ms", "tokens_per_s", "retry_after_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"SimulatorConfig.{name} must be >= 0")
        if not 0 <= self.jitter <= 1:
            raise ValueError("SimulatorConfig.jitter must be within [0, 1]")
        rates = (self.error_rate, self.rate_429, self.rate_529)
        if any(r < 0 for r in rates) or sum(rates) > 1:
            raise ValueError("SimulatorConfig fault rates must be >= 0 and sum to at most 1")
        if (
            self.reply_tokens < 0
            or self.max_request_bytes < 1
            or self.cache_entries < 0
            or self.request_log_entries < 0
        ):
            raise ValueError("SimulatorConfig sizes must be positive")
        for name in ("rpm_limit", "tpm_limit"):
            limit = getattr(self, name)
            if limit is not None and limit < 1:
                raise ValueError(f"SimulatorConfig.{name} must be >= 1 (or None for no limit)")
        if not (math.isfinite(self.ratelimit_period_s) and self.ratelimit_period_s > 0):
            raise ValueError("SimulatorConfig.ratelimit_period_s must be > 0")
        every, length = self.overload_every_s, self.overload_for_s
        if not (math.isfinite(every) and math.isfinite(length) and every >= 0 and length >= 0):
            raise ValueError("SimulatorConfig overload_every_s/overload_for_s must be >= 0")
        if every > 0 and length >= every:
            raise ValueError("SimulatorConfig.overload_for_s must be shorter than overload_every_s")
        for name in ("batch_processing_s", "batch_request_s", "batch_expiry_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"SimulatorConfig.{name} must be >= 0")
        for name in ("aws_clock_skew_s", "vertex_token_lifetime_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"SimulatorConfig.{name} must be >= 0")
        if self.batch_entries < 1:
            raise ValueError("SimulatorConfig.batch_entries must be >= 1")
