"""The tenants file (``TENANTS_FILE``): TOML, read with ``tomllib``, validated strictly.

The format: one ``[[tenant]]`` table per tenant, every field flat (so ``trio-batcher keys
add`` can edit a tenant without rewriting the rest of the file)::

    # Keys are stored as SHA-256 hex digests only; `trio-batcher keys add NAME` adds one.

    [[tenant]]
    name = "team-a"                     # [A-Za-z0-9][A-Za-z0-9._-]*, at most 64, unique
    key_sha256 = [                      # the keys' SHA-256 hex digests (64 hex each)
        "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    ]
    weight = 3                          # share when the gate queues (> 0, default 1)
    max_inflight = 8                    # most gate slots at once (>= 1)
    max_queue = 32                      # most requests waiting for a slot (>= 0)
    rpm = 600                           # requests per minute (>= 1)
    tpm = 400000                        # tokens per minute, input + output (>= 1)
    budget_usd = 500.0                  # spend per period (>= 0; 0 stops every request)
    budget_period = "monthly"           # "monthly" (calendar month, UTC) or "30d" (rolling)
    models = ["claude-sonnet-*", "claude-haiku-4-5"]   # exact names or fnmatch patterns

    [[tenant]]
    name = "batch-jobs"
    key_sha256 = ["60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752"]

Only ``name`` is required. Every omitted limit means "none of its own". A tenant without
keys is allowed (one whose keys were all revoked: nobody can be it); ``anonymous`` is the
one name with a meaning of its own: declared without keys, it sets the limits of
unauthenticated callers while no key is configured anywhere. Names beginning ``key-`` are
refused: they are the tenants ``PROXY_API_KEYS`` keys become (``directory``).

What is refused, with the tenant (by name, or by position when its name is the problem)
and the field named: a TOML syntax error (with tomllib's line and column); any key but
``tenant`` at the top level; an unknown field (the closest known one is suggested); a value
of the wrong type (``true`` is not a number; ``inf`` and ``nan`` are not amounts); a
duplicate name; a digest that is not 64 hex characters, or that appears twice (in one
tenant or two); ``budget_period`` without ``budget_usd``; an empty ``models`` list. A digest
that fails is never echoed, since a key pasted in place of its digest would otherwise end up
in a log. Every problem is reported at once, not just the first.
"""

from __future__ import annotations

import difflib
import math
import os
import re
import tomllib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final, final

from .directory import TenantDirectory, build_directory, proxy_key_digests
from .model import ANONYMOUS, PROXY_KEY_PREFIX, Budget, BudgetPeriod, Tenant

__all__ = [
    "FIELDS",
    "TenantsFileError",
    "load_tenants",
    "name_problem",
    "parse_tenants",
    "read_tenants_file",
]

FIELDS: Final = (
    "name",
    "key_sha256",
    "weight",
    "max_inflight",
    "max_queue",
    "rpm",
    "tpm",
    "budget_usd",
    "budget_period",
    "models",
)

_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_DIGEST: Final = re.compile(r"[0-9a-fA-F]{64}")
_PERIOD_DAYS: Final = re.compile(r"([1-9][0-9]{0,2})d")
_MAX_SHOWN: Final = 8  # problems listed in one message; the rest are counted


@final
class TenantsFileError(ValueError):
    """The tenants file cannot be used; ``problems`` lists every reason, each naming the
    tenant and field. ``str()`` is one line (for ``SettingsError`` and the log)."""

    def __init__(self, source: str, problems: Sequence[str]) -> None:
        self.source = source
        self.problems = tuple(problems)
        shown = "; ".join(self.problems[:_MAX_SHOWN])
        more = len(self.problems) - _MAX_SHOWN
        if more > 0:
            shown += f"; and {more} more"
        super().__init__(f"{source}: {shown}")


def parse_tenants(text: str, *, source: str = "<tenants file>") -> tuple[Tenant, ...]:
    """The tenants a tenants file declares, in file order. Pure: no I/O, no keys.

    Raises:
      TenantsFileError: listing every problem found.
    """
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TenantsFileError(source, [f"not valid TOML: {exc}"]) from None
    problems: list[str] = []
    for key in document:
        if key != "tenant":
            problems.append(f"unknown top-level key {key!r} (tenants are [[tenant]] tables)")
    entries = document.get("tenant", [])
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        problems.append("'tenant' must be an array of tables: write each one as [[tenant]]")
        entries = []
    tenants: list[Tenant] = []
    names: dict[str, int] = {}
    owners: dict[str, str] = {}
    for position, entry in enumerate(entries, 1):
        tenant = _tenant(entry, position, problems)
        if tenant is None:
            continue
        if tenant.name in names:
            problems.append(
                f"tenant {tenant.name!r} is declared twice (tenants #{names[tenant.name]} "
                f"and #{position})"
            )
            continue
        names[tenant.name] = position
        for digest in sorted(tenant.key_hashes):
            owner = owners.setdefault(digest, tenant.name)
            if owner != tenant.name:
                problems.append(
                    f"tenant {tenant.name!r}: key_sha256 {digest[:8]}... is already tenant "
                    f"{owner!r}'s (a key belongs to one tenant)"
                )
        tenants.append(tenant)
    if problems:
        raise TenantsFileError(source, problems)
    return tuple(tenants)


def read_tenants_file(path: str | os.PathLike[str]) -> tuple[Tenant, ...]:
    """``parse_tenants`` on a file (UTF-8). Reads synchronously: the file is small.

    Raises:
      TenantsFileError: it cannot be read, or is refused.
    """
    source = os.fspath(path)
    try:
        data = Path(path).read_bytes()
        text = data.decode("utf-8")
    except OSError as exc:
        raise TenantsFileError(source, [f"cannot read: {exc.strerror or exc}"]) from None
    except UnicodeDecodeError as exc:
        raise TenantsFileError(source, [f"not UTF-8 (byte {exc.start})"]) from None
    return parse_tenants(text, source=source)


def load_tenants(
    path: str | os.PathLike[str] | None, *, proxy_api_keys: Sequence[str] = ()
) -> TenantDirectory:
    """The directory in force for a tenants file (or none) and ``PROXY_API_KEYS``.

    The keys are hashed here and not kept (``directory``).

    Raises:
      TenantsFileError: the file cannot be read or is refused.
    """
    tenants = () if path is None else read_tenants_file(path)
    return build_directory(
        tenants,
        proxy_key_digests(proxy_api_keys),
        source=None if path is None else os.fspath(path),
    )


def name_problem(name: object) -> str | None:
    """Why ``name`` cannot be a tenant's name, or None when it can."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        return f"must be 1-64 of A-Z a-z 0-9 . _ - (starting with a letter or digit), got {name!r}"
    if name.startswith(PROXY_KEY_PREFIX):
        return f"may not begin {PROXY_KEY_PREFIX!r}: such names are PROXY_API_KEYS keys' tenants"
    return None


# -- one [[tenant]] table ------------------------------------------------------------------


def _tenant(entry: dict[str, Any], position: int, problems: list[str]) -> Tenant | None:
    name = entry.get("name")
    problem = "is required" if name is None else name_problem(name)
    who = f"tenant #{position}" if problem and not isinstance(name, str) else f"tenant {name!r}"
    if problem:
        problems.append(f"{who}: name {problem}")
        name = None
    before = len(problems)

    def bad(field: str, problem: str) -> None:
        problems.append(f"{who}: {field}: {problem}")

    for key in entry:
        if key not in FIELDS:
            close = difflib.get_close_matches(key, FIELDS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            bad(key, f"unknown field{hint}; known fields: {', '.join(FIELDS)}")

    digests = _digests(entry.get("key_sha256", []), bad)
    if name == ANONYMOUS and digests:
        bad("key_sha256", "the anonymous tenant is who callers without a key are; it has none")
    weight = _number(entry, "weight", bad, minimum=0.0, strict=True)
    max_inflight = _integer(entry, "max_inflight", bad, minimum=1)
    max_queue = _integer(entry, "max_queue", bad, minimum=0)
    rpm = _integer(entry, "rpm", bad, minimum=1)
    tpm = _integer(entry, "tpm", bad, minimum=1)
    budget = _budget(entry, bad)
    models = _models(entry.get("models"), bad)
    if name is None or len(problems) > before:
        return None
    return Tenant(
        name=name,
        key_hashes=frozenset(digests),
        weight=1.0 if weight is None else weight,
        max_inflight=max_inflight,
        max_queue=max_queue,
        rpm=rpm,
        tpm=tpm,
        budget=budget,
        models=models,
    )


_Bad = Callable[[str, str], None]


def _digests(value: object, bad: _Bad) -> list[str]:
    if not isinstance(value, list):
        bad("key_sha256", 'must be a list of SHA-256 hex digests: key_sha256 = ["..."]')
        return []
    digests: list[str] = []
    for index, item in enumerate(value):
        if not isinstance(item, str) or not _DIGEST.fullmatch(item):
            # Never echo it: a key pasted where its digest belongs must not reach a log.
            bad(
                f"key_sha256[{index}]",
                "not a SHA-256 hex digest (64 hex characters; value not shown). Store the "
                "key's digest, never the key: `trio-batcher keys add` does it for you",
            )
            continue
        digest = item.lower()
        if digest in digests:
            bad(f"key_sha256[{index}]", f"{digest[:8]}... is listed twice")
            continue
        digests.append(digest)
    return digests


def _integer(entry: dict[str, Any], field: str, bad: _Bad, *, minimum: int) -> int | None:
    value = entry.get(field)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        bad(field, f"expected a whole number, got {value!r}")
        return None
    if value < minimum:
        bad(field, f"must be >= {minimum}, got {value}")
        return None
    return value


def _number(
    entry: dict[str, Any], field: str, bad: _Bad, *, minimum: float, strict: bool = False
) -> float | None:
    value = entry.get(field)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        bad(field, f"expected a finite number, got {value!r}")
        return None
    if value < minimum or (strict and value == minimum):
        bad(field, f"must be {'>' if strict else '>='} {minimum:g}, got {value!r}")
        return None
    return float(value)


def _budget(entry: dict[str, Any], bad: _Bad) -> Budget | None:
    usd = _number(entry, "budget_usd", bad, minimum=0.0)
    raw = entry.get("budget_period")
    if raw is None:
        return None if usd is None else Budget(usd)
    period: BudgetPeriod | None = None
    if raw == "monthly":
        period = BudgetPeriod()
    elif isinstance(raw, str) and (match := _PERIOD_DAYS.fullmatch(raw)):
        period = BudgetPeriod(days=int(match.group(1)))
    else:
        bad(
            "budget_period",
            f'expected "monthly" (the calendar month, UTC) or a rolling number of days '
            f'such as "30d" (1d to 999d), got {raw!r}',
        )
    if usd is None:
        if "budget_usd" not in entry:
            bad("budget_period", "needs budget_usd (the amount per period)")
        return None
    return None if period is None else Budget(usd, period)


def _models(value: object, bad: _Bad) -> tuple[str, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        bad("models", 'must be a list of model names or patterns: models = ["claude-*"]')
        return None
    if not value:
        bad("models", "an empty list allows nothing: leave models out to allow every model")
        return None
    models: list[str] = []
    for index, item in enumerate(value):
        if (
            not isinstance(item, str)
            or not item
            or not item.isprintable()
            or any(c.isspace() for c in item)
        ):
            bad(f"models[{index}]", f"expected a model name or pattern, got {item!r}")
            continue
        models.append(item)
    return tuple(models)
