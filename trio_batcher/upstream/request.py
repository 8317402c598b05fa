"""What the pipeline asks the upstream for: one Messages API call, in the upstream's terms.

Every client dialect decodes its request into an ``UpstreamRequest`` at the edge, so
everything behind the edge -- the gate, windows, the dispatcher, resilience, the
observatory -- handles one currency and has no per-dialect branches.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, final

__all__ = ["UpstreamRequest"]


@final
@dataclass(frozen=True, slots=True)
class UpstreamRequest:
    """One ``POST /v1/messages`` to make upstream.

    Attributes:
      body: the Messages request, as parsed (the pipeline reads ``model`` and ``stream``).
      model: the upstream model name (cooldowns are per model; metrics count by it).
      stream: whether to stream.
      surface: which door the request came in by (``"openai.chat"``,
        ``"anthropic.messages"``), for the observatory's per-surface counts.
      content: the body already serialised, sent as it is. A door that relays the client's
        own body sets it, so the upstream receives the client's bytes, field for field;
        ``None`` serialises ``body``.
      headers: extra request headers for the upstream (``anthropic-beta``, and an
        ``anthropic-version`` that replaces the configured one), lower-case ASCII names.
      tenant: the name of the tenant it is for (never its key), which the observatory
        counts it under; set by the pipeline once the tenant is admitted.
    """

    body: Mapping[str, Any]
    model: str
    stream: bool
    surface: str
    content: bytes | None = None
    headers: tuple[tuple[bytes, bytes], ...] = ()
    tenant: str | None = None
