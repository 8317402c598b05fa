"""The upstreams file (``UPSTREAMS_FILE``): which deployments serve Claude, as frozen data.

TOML, read with ``tomllib``, validated strictly at start, in the tenants file's manner
(``tenants.keys_file``): every problem at once, each naming the upstream and the field, what
was expected and what to do. One ``[[upstream]]`` table per deployment::

    [[upstream]]
    name = "anthropic-main"       # [A-Za-z0-9][A-Za-z0-9._-]*, at most 64, unique (metrics, logs)
    kind = "anthropic"            # "anthropic", "bedrock" or "vertex"
    api_key_env = "ANTHROPIC_API_KEY"   # the variable holding the key (never the key itself)
    max_concurrency = 64          # this upstream's own cap (>= 1; omitted: none of its own)
    weight = 3                    # share of new conversations among its priority (>= 1, default 1)
    priority = 0                  # lower is preferred; higher ones take over when lower are full
    models = { "claude-sonnet-4-5" = "claude-sonnet-4-5-20250929" }   # client name -> model id

    [[upstream]]
    name = "bedrock-east"
    kind = "bedrock"
    region = "us-east-1"          # also the SigV4 signing region
    profile = "prod"              # optional: the AWS profile of the standard chain
    weight = 1
    models = { "claude-sonnet-4-5" = "us.anthropic.claude-sonnet-4-5-20250929-v1:0" }

    [[upstream]]
    name = "vertex-eu"
    kind = "vertex"
    project = "my-project"
    region = "europe-west1"
    priority = 1
    models = { "claude-sonnet-4-5" = "claude-sonnet-4-5@20250929" }

``base_url`` (every kind, optional) is what the official SDK's client for the kind takes as
``base_url``: ``Anthropic``'s host root (default ``https://api.anthropic.com``),
``AnthropicBedrock``'s host root (default ``https://bedrock-runtime.{region}.amazonaws.com``),
``AnthropicVertex``'s URL ending in ``/v1`` (default per region). ``models`` maps the name a
client sends to this upstream's id for it: an anthropic upstream passes unmapped names
through; a bedrock or vertex upstream serves only the names it maps (so it must map one).

Keys never live in the file: an anthropic upstream names the environment variable that holds
its key (``api_key_env``, default ``ANTHROPIC_API_KEY``); the clouds use their standard
credential chains (``upstream.kinds``). A field named like a secret (``api_key``, ``token``...)
or any value that looks like an Anthropic key is refused, and never echoed. A kind whose pip
extra is missing is refused with the pip command (``upstream.kinds.require_extra``).

Without the file, ``from_settings`` describes the one anthropic upstream
``ANTHROPIC_BASE_URL`` and ``ANTHROPIC_API_KEY`` always meant, named ``default``, so nothing
changes for existing deployments. This is the data the router (``routing``) and the fleet
(``fleet``, ``build``) are made of.
"""

from __future__ import annotations

import difflib
import os
import re
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final, Literal, final
from urllib.parse import urlsplit

from ..settings import Settings
from ..upstream.kinds.extras import MissingExtraError, require_extra

__all__ = [
    "COMMON_FIELDS",
    "DEFAULT_NAME",
    "KINDS",
    "KIND_FIELDS",
    "AnthropicAccess",
    "BedrockAccess",
    "Kind",
    "UpstreamSpec",
    "UpstreamsFileError",
    "VertexAccess",
    "from_settings",
    "parse_upstreams",
    "read_upstreams_file",
    "upstreams_in_force",
]

Kind = Literal["anthropic", "bedrock", "vertex"]
KINDS: Final[tuple[Kind, ...]] = ("anthropic", "bedrock", "vertex")
COMMON_FIELDS: Final = (
    "name",
    "kind",
    "max_concurrency",
    "weight",
    "priority",
    "base_url",
    "models",
)
KIND_FIELDS: Final[Mapping[Kind, tuple[str, ...]]] = {
    "anthropic": ("api_key_env",),
    "bedrock": ("region", "profile"),
    "vertex": ("project", "region"),
}
DEFAULT_NAME: Final = "default"
DEFAULT_KEY_ENV: Final = "ANTHROPIC_API_KEY"
ANTHROPIC_BASE_URL: Final = "https://api.anthropic.com"

_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_ENV_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
# A cloud identifier: a region, a project, a profile (letters, digits, - _ . only).
_IDENT: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
# Field names a secret would be pasted under; api_key_env (a variable's name) is not one.
_SECRET_FIELD: Final = re.compile(r"(?i)(key|secret|token|password|credential)(?!_env$)")
_ANTHROPIC_KEY: Final = "sk-ant-"
_MAX_SHOWN: Final = 8  # problems listed in one message; the rest are counted


@final
@dataclass(frozen=True)
class AnthropicAccess:
    """How to reach an anthropic upstream: its origin and the variable holding its key."""

    api_key_env: str = DEFAULT_KEY_ENV
    base_url: str = ANTHROPIC_BASE_URL
    kind: Literal["anthropic"] = "anthropic"


@final
@dataclass(frozen=True)
class BedrockAccess:
    """How to reach a Bedrock deployment (``upstream.kinds.BedrockTarget(region, base_url)``)."""

    region: str
    profile: str | None = None
    base_url: str | None = None
    kind: Literal["bedrock"] = "bedrock"


@final
@dataclass(frozen=True)
class VertexAccess:
    """How to reach a Vertex AI deployment (``upstream.kinds.VertexTarget``)."""

    project: str
    region: str
    base_url: str | None = None
    kind: Literal["vertex"] = "vertex"


Access = AnthropicAccess | BedrockAccess | VertexAccess


@final
@dataclass(frozen=True)
class UpstreamSpec:
    """One deployment the gateway may send a call to, as the file (or settings) declare it.

    ``max_concurrency`` None: no cap of its own (the gateway's own caps still apply).
    ``models`` maps a client's model name to this upstream's id for it (read-only).
    """

    name: str
    access: Access
    max_concurrency: int | None = None
    weight: int = 1
    priority: int = 0
    models: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def kind(self) -> Kind:
        return self.access.kind

    def model_id(self, model: str) -> str | None:
        """This upstream's id for the client's ``model``, or None if it does not serve it.

        An anthropic upstream passes a name it does not map through unchanged (Anthropic's
        API knows every model); a cloud serves only what its ``models`` table maps, since
        its ids differ (``us.anthropic.claude-...-v1:0``, ``claude-...@2025...``).
        """
        mapped = self.models.get(model)
        if mapped is not None:
            return mapped
        return model if self.kind == "anthropic" else None


@final
class UpstreamsFileError(ValueError):
    """The upstreams file cannot be used; ``problems`` lists every reason, each naming the
    upstream and field. ``str()`` is one line (for ``SettingsError`` and the log)."""

    def __init__(self, source: str, problems: Sequence[str]) -> None:
        self.source = source
        self.problems = tuple(problems)
        shown = "; ".join(self.problems[:_MAX_SHOWN])
        if len(self.problems) > _MAX_SHOWN:
            shown += f"; and {len(self.problems) - _MAX_SHOWN} more"
        super().__init__(f"{source}: {shown}")


def from_settings(settings: Settings) -> tuple[UpstreamSpec, ...]:
    """The single anthropic upstream a gateway without ``UPSTREAMS_FILE`` has always had:
    ``ANTHROPIC_BASE_URL``, the key in ``ANTHROPIC_API_KEY``, no cap of its own."""
    access = AnthropicAccess(api_key_env=DEFAULT_KEY_ENV, base_url=settings.anthropic_base_url)
    return (UpstreamSpec(name=DEFAULT_NAME, access=access),)


def upstreams_in_force(settings: Settings) -> tuple[UpstreamSpec, ...]:
    """``UPSTREAMS_FILE``'s upstreams, or ``from_settings``'s one when no file is named.

    Raises:
      UpstreamsFileError: the file cannot be read or is refused.
    """
    if settings.upstreams_file is None:
        return from_settings(settings)
    return read_upstreams_file(settings.upstreams_file)


def read_upstreams_file(
    path: str | os.PathLike[str], *, require: Callable[[str], None] = require_extra
) -> tuple[UpstreamSpec, ...]:
    """``parse_upstreams`` on a file (UTF-8). Reads synchronously: the file is small.

    Raises:
      UpstreamsFileError: it cannot be read, or is refused.
    """
    source = os.fspath(path)
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except OSError as exc:
        raise UpstreamsFileError(source, [f"cannot read: {exc.strerror or exc}"]) from None
    except UnicodeDecodeError as exc:
        raise UpstreamsFileError(source, [f"not UTF-8 (byte {exc.start})"]) from None
    return parse_upstreams(text, source=source, require=require)


def parse_upstreams(
    text: str,
    *,
    source: str = "<upstreams file>",
    require: Callable[[str], None] = require_extra,
) -> tuple[UpstreamSpec, ...]:
    """The upstreams a file declares, in file order. Pure but for ``require``, which is
    called once per kind the file names (``require_extra``: imports the kind's SDK).

    Raises:
      UpstreamsFileError: listing every problem found.
    """
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UpstreamsFileError(source, [f"not valid TOML: {exc}"]) from None
    problems: list[str] = []
    for key in document:
        if key != "upstream":
            problems.append(f"unknown top-level key {key!r} (upstreams are [[upstream]] tables)")
    entries = document.get("upstream", [])
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        problems.append("'upstream' must be an array of tables: write each one as [[upstream]]")
        entries = []
    elif not entries and not problems:
        problems.append(
            "declares no upstream: add an [[upstream]] table, or unset UPSTREAMS_FILE to use "
            "ANTHROPIC_BASE_URL and ANTHROPIC_API_KEY"
        )
    specs: list[UpstreamSpec] = []
    positions: dict[str, int] = {}
    for position, entry in enumerate(entries, 1):
        spec = _Table(entry, position, problems).spec()
        if spec is None:
            continue
        if spec.name in positions:
            problems.append(
                f"upstream {spec.name!r} is declared twice (upstreams #{positions[spec.name]} "
                f"and #{position}); names must be unique: they label metrics and logs"
            )
            continue
        positions[spec.name] = position
        specs.append(spec)
    checked: set[str] = set()
    for spec in specs:
        if spec.kind in checked:
            continue
        checked.add(spec.kind)
        try:
            require(spec.kind)
        except MissingExtraError as exc:
            problems.append(f"upstream {spec.name!r}: kind: {exc}")
    if problems:
        raise UpstreamsFileError(source, problems)
    return tuple(specs)


# -- one [[upstream]] table -----------------------------------------------------------------


@final
class _Table:
    """One ``[[upstream]]`` table being read: each reader notes its problems and returns
    None for a field it refuses, so every problem of every table is reported at once."""

    def __init__(self, entry: dict[str, Any], position: int, problems: list[str]) -> None:
        self.entry = dict(entry)  # a value that looks like a key is dropped once reported
        self.problems = problems
        name = entry.get("name")
        self.name: str | None = None
        if name is None:
            self.who = f"upstream #{position}"
            self.bad("name", 'is required (a unique label for metrics and logs: name = "main")')
        elif not isinstance(name, str) or not _NAME.fullmatch(name):
            self.who = f"upstream #{position}"
            self.bad(
                "name",
                f"must be 1-64 of A-Z a-z 0-9 . _ - (starting with a letter or digit), "
                f"got {_shown(name)}",
            )
        else:
            self.who = f"upstream {name!r}"
            self.name = name

    def bad(self, field: str, problem: str) -> None:
        self.problems.append(f"{self.who}: {field}: {problem}")

    def spec(self) -> UpstreamSpec | None:
        before = len(self.problems)
        kind = self.kind()
        self.fields(kind)
        max_concurrency = self.integer("max_concurrency", minimum=1)
        weight = self.integer("weight", minimum=1)
        priority = self.integer("priority", minimum=None)
        base_url = self.base_url()
        models = self.models(kind)
        access = None if kind is None else self.access(kind, base_url)
        if self.name is None or access is None or len(self.problems) > before:
            return None
        return UpstreamSpec(
            name=self.name,
            access=access,
            max_concurrency=max_concurrency,
            weight=1 if weight is None else weight,
            priority=0 if priority is None else priority,
            models=MappingProxyType(models),
        )

    def kind(self) -> Kind | None:
        value = self.entry.get("kind")
        for kind in KINDS:
            if value == kind:
                return kind
        choices = ", ".join(f'"{k}"' for k in KINDS)
        self.bad(
            "kind",
            f"is required, one of {choices}"
            if value is None
            else f"expected one of {choices}, got {_shown(value)}",
        )
        return None

    def fields(self, kind: Kind | None) -> None:
        known = COMMON_FIELDS + (KIND_FIELDS[kind] if kind is not None else ())
        every = COMMON_FIELDS + tuple(dict.fromkeys(f for fs in KIND_FIELDS.values() for f in fs))
        for key, value in list(self.entry.items()):
            if isinstance(value, str) and value.startswith(_ANTHROPIC_KEY):
                self.bad(
                    key,
                    "looks like an Anthropic API key (value not shown). Keys never live in "
                    "this file: put it in an environment variable and name that variable: "
                    'api_key_env = "MY_KEY_VAR"',
                )
                del self.entry[key]
                continue
            if key in known:
                continue
            if _SECRET_FIELD.search(key):
                self.bad(
                    key,
                    "secrets never live in this file (value not shown): an anthropic upstream "
                    "names the environment variable holding its key (api_key_env); bedrock "
                    "and vertex use their standard credential chains",
                )
            elif kind is not None and key in every:
                owners = [k for k in KINDS if key in KIND_FIELDS[k]]
                self.bad(
                    key,
                    f"is a field of kind {' and '.join(owners)}, not {kind}; fields of kind "
                    f"{kind}: {', '.join(known)}",
                )
            else:
                close = difflib.get_close_matches(key, every if kind is None else known, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                self.bad(key, f"unknown field{hint}; known fields: {', '.join(known)}")

    def integer(self, field: str, *, minimum: int | None) -> int | None:
        value = self.entry.get(field)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            self.bad(field, f"expected a whole number, got {_shown(value)}")
            return None
        if minimum is not None and value < minimum:
            self.bad(field, f"must be >= {minimum}, got {value}")
            return None
        return value

    def text(self, field: str, pattern: re.Pattern[str], what: str) -> str | None:
        value = self.entry.get(field)
        if value is None:
            return None
        if not isinstance(value, str) or not pattern.fullmatch(value):
            self.bad(field, f"expected {what}, got {_shown(value)}")
            return None
        return value

    def base_url(self) -> str | None:
        value = self.entry.get("base_url")
        if value is None:
            return None
        parts = urlsplit(value) if isinstance(value, str) else None
        if (
            parts is None
            or parts.scheme not in ("http", "https")
            or not parts.hostname
            or parts.query
            or parts.fragment
            or parts.username is not None
            or any(c.isspace() for c in value)
        ):
            # Not echoed: a URL with credentials in it is a secret.
            self.bad(
                "base_url",
                "expected an http:// or https:// URL with a host and no query, fragment or "
                "credentials (value not shown), such as https://api.anthropic.com",
            )
            return None
        return str(value).rstrip("/")

    def models(self, kind: Kind | None) -> dict[str, str]:
        value = self.entry.get("models")
        cloud = kind in ("bedrock", "vertex")
        example = 'models = { "claude-sonnet-4-5" = "<this upstream\'s model id>" }'
        if value is None:
            if cloud:
                self.bad(
                    "models",
                    f"is required for kind {kind}: it serves only the models it maps, from "
                    f"the name clients send to its own id: {example}",
                )
            return {}
        if not isinstance(value, dict):
            self.bad("models", f"must be a table of client model name -> model id: {example}")
            return {}
        if not value and cloud:
            self.bad("models", f"an empty table serves nothing; map at least one: {example}")
        models: dict[str, str] = {}
        for name, target in value.items():
            if not _token(name):
                self.bad("models", f"expected a model name as each key, got {name!r}")
            elif not isinstance(target, str) or not _token(target):
                self.bad(f"models.{name}", f"expected a model id, got {_shown(target)}")
            else:
                models[name] = target
        return models

    def access(self, kind: Kind, base_url: str | None) -> Access | None:
        if kind == "anthropic":
            env = self.entry.get("api_key_env", DEFAULT_KEY_ENV)
            if not isinstance(env, str) or not _ENV_NAME.fullmatch(env):
                # Not echoed: what is here instead of a variable's name may be the key.
                self.bad(
                    "api_key_env",
                    "expected the name of the environment variable holding the key, such as "
                    '"ANTHROPIC_API_KEY" (value not shown)',
                )
                return None
            return AnthropicAccess(api_key_env=env, base_url=base_url or ANTHROPIC_BASE_URL)
        region = self.required(
            "region",
            'an AWS region such as "us-east-1"'
            if kind == "bedrock"
            else 'a Google Cloud location such as "us-east5"',
        )
        if kind == "bedrock":
            profile = self.text("profile", _IDENT, "an AWS profile name")
            return None if region is None else BedrockAccess(region, profile, base_url)
        project = self.required("project", 'a Google Cloud project id such as "my-project"')
        if region is None or project is None:
            return None
        return VertexAccess(project, region, base_url)

    def required(self, field: str, what: str) -> str | None:
        if field not in self.entry:
            self.bad(field, f"is required: {what}")
            return None
        return self.text(field, _IDENT, what)


def _token(value: object) -> bool:
    return (
        isinstance(value, str)
        and bool(value)
        and value.isprintable()
        and not any(c.isspace() for c in value)
        and len(value) <= 256
    )


def _shown(value: object) -> str:
    """``value`` for a message, unless it may be a key pasted in the wrong place."""
    if isinstance(value, str) and (value.startswith(_ANTHROPIC_KEY) or len(value) > 80):
        return "a string (value not shown)"
    return repr(value)
