"""The settings' parsers: each turns one raw environment string into a value.

They are the only place a setting's syntax is checked. Each raises ``ValueError`` with a
short reason and nothing else, so ``Settings.from_env`` can name the variable in one
``SettingsError`` whatever the parser, and the CLI flags (which go through the same parsers)
give the same messages. Secrets are never echoed in a reason.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Final
from urllib.parse import urlsplit

ANTHROPIC_VERSIONS: Final = ("2023-06-01", "2026-10-21")


def model_name(raw: str) -> str:
    value = raw.strip()
    if not value:
        raise ValueError("must name a model (e.g. claude-sonnet-5-5)")
    if not value.isprintable() or any(c.isspace() for c in value):
        raise ValueError("must be a model id: no spaces or control characters")
    return value


def optional_str(raw: str) -> str | None:
    return raw.strip() or None


def deployment_id(raw: str) -> str | None:
    """A name for a deployment's stored state: printable ASCII without spaces, such as
    ``team-a`` or the id a gateway logged at startup (``https://api.anthropic.com#…``)."""
    value = raw.strip()
    if value and not (
        len(value) <= 200
        and value.isascii()
        and value.isprintable()
        and not any(c.isspace() for c in value)
    ):
        raise ValueError(f"expected up to 200 printable ASCII characters, no spaces, got {raw!r}")
    return value or None


def header_secret(raw: str) -> str | None:
    """A key sent as an HTTP header: printable ASCII. The value is never put in the error."""
    value = raw.strip()
    if value and not (value.isascii() and value.isprintable()):
        raise ValueError("must be printable ASCII (it is sent as an HTTP header); value not shown")
    return value or None


def boolean(raw: str) -> bool:
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"expected a boolean (1/0, true/false, yes/no, on/off), got {raw!r}")


def integer(minimum: int) -> Callable[[str], int]:
    def parse(raw: str) -> int:
        try:
            value = int(raw.strip())
        except ValueError:
            raise ValueError(f"expected an integer, got {raw!r}") from None
        if value < minimum:
            raise ValueError(f"must be >= {minimum}, got {value}")
        return value

    return parse


def number(minimum: float, *, strict: bool = False) -> Callable[[str], float]:
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


def share(raw: str) -> float:
    """A fraction in (0, 0.5]: a lane's least share (``LANE_DEFERRABLE_SHARE``)."""
    value = number(0, strict=True)(raw)
    if value > 0.5:
        raise ValueError(f"must be <= 0.5, got {value:g}")
    return value


def base_url(raw: str) -> str:
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


def redis_url(raw: str) -> str | None:
    """``redis://`` or ``rediss://`` (TLS) or ``unix://``; it may hold a password, so the
    value is never put in the error."""
    value = raw.strip()
    if not value:
        return None
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 -- raises ValueError on a bad port
    except ValueError:
        raise ValueError("not a valid URL (value not shown)") from None
    if parts.scheme not in ("redis", "rediss", "unix"):
        raise ValueError("expected redis://host:port/db, rediss://... or unix://... (not shown)")
    if parts.scheme != "unix" and not parts.hostname:
        raise ValueError("a redis:// URL needs a host (value not shown)")
    return value


def key_prefix(raw: str) -> str:
    value = raw.strip()
    if not value or not value.isascii() or not value.isprintable() or " " in value:
        raise ValueError(f"must be printable ASCII without spaces, got {raw!r}")
    return value


def one_of(*choices: str) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        value = raw.strip().lower()
        if value not in choices:
            raise ValueError(f"expected one of {', '.join(choices)}, got {raw!r}")
        return value

    return parse


def anthropic_version(raw: str) -> str:
    value = raw.strip()
    if value not in ANTHROPIC_VERSIONS:
        raise ValueError(f"expected one of {', '.join(ANTHROPIC_VERSIONS)}, got {raw!r}")
    return value


def csv(raw: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in raw.split(",") if item.strip())


def header_secrets(raw: str) -> tuple[str, ...]:
    """Comma-separated keys clients send in a header: each printable ASCII (not shown)."""
    keys = csv(raw)
    if not all(key.isascii() and key.isprintable() for key in keys):
        raise ValueError("keys must be printable ASCII (clients send them in a header); not shown")
    return keys


def web_origins(raw: str) -> tuple[str, ...]:
    """Web origins, spelled as browsers send them: ``scheme://host[:port]``, ``null`` or ``*``.

    Normalised so that a listed origin can match: lower case, no default port
    (``https://x:443`` is sent as ``https://x``), international host names in punycode.
    Anything a browser never sends (a path, a wildcard inside a name) is refused here rather
    than silently never matching.
    """
    origins = []
    for item in csv(raw):
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


def host_names(raw: str) -> tuple[str, ...]:
    """Host names as a ``Host`` header carries them, without the port: ``gateway.internal``,
    ``10.0.0.5``, ``[fd00::1]``, or a lone ``*`` for any. Lower case, no final dot; a scheme,
    path, port or wildcard inside a name is refused rather than silently never matching."""
    names = []
    for item in csv(raw):
        value = item.lower().rstrip(".")
        if value == "*":
            names.append(value)
            continue
        bracketed = value.startswith("[") and value.endswith("]") and value.count("]") == 1
        if (
            not value
            or not value.isascii()
            or any(c in value for c in "/@*?# \t")
            or (":" in value and not bracketed)
        ):
            raise ValueError(
                "expected host names like gateway.internal, 10.0.0.5 or [fd00::1] (no scheme, "
                f"port or path; no wildcards but a lone '*'), got {item!r}"
            )
        names.append(value)
    return tuple(names)


def file_path(raw: str) -> str | None:
    value = raw.strip()
    if not value:
        return None
    if not os.path.isfile(value):
        raise ValueError(f"no such file: {value!r}")
    return value
