"""What the gateway checks of a Messages request before it spends an upstream call.

Only what it needs to govern the request -- ``model`` (cooldowns, metrics, prices),
``stream`` (how to relay), and the presence of ``messages`` and ``max_tokens`` -- so that a
body no Anthropic model could answer is a 400 at once, in Anthropic's words, instead of an
upstream round trip. Everything else, unknown and beta fields included, is the upstream's
to judge: the body goes up as the client sent it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from ...errors import ProxyError

__all__ = ["FORWARDED_HEADERS", "check_count_tokens", "check_messages", "forwarded_headers"]

# Request headers relayed to the upstream byte for byte (the key never: we send ours).
FORWARDED_HEADERS: Final = frozenset({b"anthropic-version", b"anthropic-beta"})


def _invalid(message: str) -> ProxyError:
    return ProxyError(400, message, type="invalid_request_error")


def _common(payload: object) -> tuple[str, bool]:
    if not isinstance(payload, dict):
        raise _invalid("The request body must be a JSON object.")
    model = payload.get("model")
    if "model" not in payload:
        raise _invalid("model: Field required")
    if not isinstance(model, str) or not model.strip():
        raise _invalid("model: Input should be a non-empty string")
    messages = payload.get("messages")
    if "messages" not in payload:
        raise _invalid("messages: Field required")
    if not isinstance(messages, list):
        raise _invalid("messages: Input should be a valid list")
    return model, payload.get("stream") is True


def check_messages(payload: object) -> tuple[str, bool]:
    """(model, stream) of a ``POST /v1/messages`` body, or a 400 naming what is missing."""
    model, stream = _common(payload)
    assert isinstance(payload, dict)
    if "max_tokens" not in payload:
        raise _invalid("max_tokens: Field required")
    cap = payload["max_tokens"]
    if not isinstance(cap, int) or isinstance(cap, bool):
        raise _invalid("max_tokens: Input should be a valid integer")
    if "stream" in payload and not isinstance(payload["stream"], bool):
        raise _invalid("stream: Input should be a valid boolean")
    _check_container(payload.get("container"))
    return model, stream


def _check_container(container: object) -> None:
    """Refuse reusing a code execution container by id, or loading skills into one: both
    name state Anthropic keeps under the gateway's one upstream key, which every tenant
    shares (an id another tenant could name), and the gateway cannot scope per tenant yet
    (``edge.api_routes``). A request without them gets a fresh container of its own."""
    if isinstance(container, str) or (
        isinstance(container, dict) and (container.get("id") or container.get("skills"))
    ):
        raise _invalid(
            "container: reusing a code execution container by id, or loading skills into "
            "one, is not relayed by this gateway: containers and skills live under the "
            "gateway's one upstream key, shared by every tenant. Send the request without "
            "them: a fresh container is made for it."
        )


def check_count_tokens(payload: object) -> str:
    """The model of a ``POST /v1/messages/count_tokens`` body, or a 400."""
    return _common(payload)[0]


def forwarded_headers(headers: Iterable[tuple[bytes, bytes]]) -> tuple[tuple[bytes, bytes], ...]:
    """The client's ``anthropic-version`` and every ``anthropic-beta`` line, as sent."""
    return tuple((name, value) for name, value in headers if name in FORWARDED_HEADERS)
