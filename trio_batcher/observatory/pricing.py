"""Prices as data: load a per-family price table and estimate what a response cost.

Theory of operation
-------------------
Prices change more often than code does, so they live in a JSON file (the bundled
``data/pricing.json``, or the operator's own via ``PRICING_FILE``) keyed by model *family*,
in USD per million tokens. A model name resolves to the longest family key it starts with,
compared in lower case, so ``claude-sonnet-4-5-20250929`` finds ``claude-sonnet-4-5`` and
never the shorter ``claude-sonnet-4``.

Two guards on top of plain prefix matching, both so that a model the table does not know
lands in the unpriced bucket instead of borrowing a sibling's price (a wrong-but-confident
dollar figure is worse than an incomplete one): a key must end at a segment boundary
(``claude-opus-4`` does not price ``claude-opus-45``), and the segment after it must not be
a nonzero one- or two-digit number, which names a minor version the table does not list
(``claude-opus-4-9``) rather than a dated alias (``claude-opus-4-20250514``), a word
(``-latest``) or ``-0`` (``claude-opus-4-0``).

A deployment that routes to several upstreams (``upstreams``) may pay different prices on
some of them (a Bedrock or Vertex regional endpoint, a negotiated rate): the optional
top-level ``upstreams`` object gives an upstream its own families, which override the main
table for the calls that upstream served. A model name then resolves over the main table's
families and that upstream's together, by the same rules, and takes the upstream's price
where it has one. The family keys match the name the client sent (as the main table's do),
never the upstream's own model id.

Money is ``Decimal`` throughout, so a million input plus a million output tokens costs
exactly the table's two prices added, with no binary-float residue.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from importlib import resources
from typing import Any, Final, final

__all__ = ["ModelPrice", "PriceTable", "TokenUsage", "load_pricing"]

_PRICE_FIELDS: Final = ("input", "output", "cache_write_5m", "cache_write_1h", "cache_read")
_MILLION: Final = Decimal(1_000_000)
_UNIT: Final = "USD per million tokens"
# What may follow a family key: the end of the name, or a separator and then anything but a
# nonzero one- or two-digit segment (dates are 8 digits, aliases are words like "latest",
# and "-0" is the same version: claude-opus-4-0 is claude-opus-4).
_ALIAS_SUFFIX: Final = re.compile(r"$|[-_.@:/](?![1-9]\d?(?!\d))")


@final
@dataclass(frozen=True, slots=True)
class TokenUsage:
    """The billable token counts of one response, normalised from Anthropic's ``usage``.

    ``input`` is the uncached input only; Anthropic's total input is ``input + cache_read +
    cache_write``. Cache writes are split by lifetime because the two are priced
    differently.
    """

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write_5m: int = 0
    cache_write_1h: int = 0

    @property
    def cache_write(self) -> int:
        return self.cache_write_5m + self.cache_write_1h

    @classmethod
    def from_anthropic(cls, usage: Mapping[str, Any]) -> TokenUsage:
        """Read an Anthropic ``usage`` object, tolerating missing, null or junk fields.

        Cache writes are priced at the 5-minute rate unless the ``cache_creation`` split is
        present; then each lifetime gets its own count. If the split and
        ``cache_creation_input_tokens`` disagree, the larger total wins and the excess is
        counted as 5-minute writes, so no written token goes uncounted.
        """
        written = _count(usage, "cache_creation_input_tokens")
        split = usage.get("cache_creation")
        one_hour = 0
        if isinstance(split, Mapping):
            one_hour = _count(split, "ephemeral_1h_input_tokens")
            written = max(written, _count(split, "ephemeral_5m_input_tokens") + one_hour)
        return cls(
            input=_count(usage, "input_tokens"),
            output=_count(usage, "output_tokens"),
            cache_read=_count(usage, "cache_read_input_tokens"),
            cache_write_5m=written - one_hour,
            cache_write_1h=one_hour,
        )


def _count(usage: Mapping[str, Any], key: str) -> int:
    value = usage.get(key)
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return 0


@final
@dataclass(frozen=True, slots=True)
class ModelPrice:
    """One family's prices, USD per million tokens."""

    input: Decimal
    output: Decimal
    cache_write_5m: Decimal
    cache_write_1h: Decimal
    cache_read: Decimal

    def cost(self, usage: TokenUsage) -> Decimal:
        """The exact USD cost of ``usage`` at these prices."""
        per_million = (
            usage.input * self.input
            + usage.output * self.output
            + usage.cache_read * self.cache_read
            + usage.cache_write_5m * self.cache_write_5m
            + usage.cache_write_1h * self.cache_write_1h
        )
        return per_million / _MILLION


@final
@dataclass(frozen=True)
class PriceTable:
    """Family prices plus where they came from. Build it with :func:`load_pricing`.

    ``upstreams``: upstream name -> the families whose prices differ there (only those);
    see the module docstring.
    """

    families: Mapping[str, ModelPrice]
    source: str = ""
    as_of: str = ""
    upstreams: Mapping[str, Mapping[str, ModelPrice]] = dataclasses.field(default_factory=dict)
    # upstream name -> the main table with that upstream's families laid over it
    _merged: Mapping[str, Mapping[str, ModelPrice]] = dataclasses.field(
        init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        merged = {name: {**self.families, **own} for name, own in self.upstreams.items()}
        object.__setattr__(self, "_merged", merged)

    def _table(self, upstream: str | None) -> Mapping[str, ModelPrice]:
        if upstream is None:
            return self.families
        return self._merged.get(upstream, self.families)

    def has_own_prices(self, upstream: str) -> bool:
        """Whether the table gives ``upstream`` prices of its own."""
        return upstream in self.upstreams

    def family_for(self, model: str, upstream: str | None = None) -> str | None:
        """The family key ``model`` resolves to (among ``upstream``'s own families too, when
        given), or None when the table does not price it."""
        name = model.lower()
        best: str | None = None
        for key in self._table(upstream):
            if (
                name.startswith(key)
                and (best is None or len(key) > len(best))
                and _ALIAS_SUFFIX.match(name, len(key))
            ):
                best = key
        return best

    def price_for(self, model: str, upstream: str | None = None) -> ModelPrice | None:
        """``model``'s prices: ``upstream``'s own where it has them, else the main table's."""
        table = self._table(upstream)
        family = self.family_for(model, upstream)
        return None if family is None else table[family]

    def cost(self, model: str, usage: TokenUsage, upstream: str | None = None) -> Decimal | None:
        """USD cost of ``usage`` on ``model`` served by ``upstream`` (None: the main table),
        or None when the model is unpriced."""
        price = self.price_for(model, upstream)
        return None if price is None else price.cost(usage)


def load_pricing(path: str | None) -> PriceTable:
    """Load a price table: the bundled one when ``path`` is None, else the file at ``path``.

    Raises:
      ValueError: the file is missing, unreadable, not JSON, or not a valid table; the
        message names the file and the problem.
    """
    where = path if path is not None else "bundled pricing.json"
    try:
        if path is None:
            text = resources.files("trio_batcher").joinpath("data/pricing.json").read_text("utf-8")
        else:
            with open(path, encoding="utf-8") as f:
                text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"pricing file {where}: cannot read it ({exc})") from exc
    try:
        doc = json.loads(text, parse_float=Decimal, parse_int=Decimal)
    except json.JSONDecodeError as exc:
        raise ValueError(f"pricing file {where}: not valid JSON ({exc})") from exc
    try:
        return _parse_table(doc)
    except ValueError as exc:
        raise ValueError(f"pricing file {where}: {exc}") from exc


def _parse_table(doc: object) -> PriceTable:
    if not isinstance(doc, dict):
        raise ValueError("the top level must be an object")
    families = doc.get("families")
    if not isinstance(families, dict) or not families:
        raise ValueError('"families" must be a non-empty object of family -> prices')
    table = _parse_families(families)
    upstreams = doc.get("upstreams", {})
    if not isinstance(upstreams, dict):
        raise ValueError('"upstreams" must be an object of upstream name -> families')
    own: dict[str, dict[str, ModelPrice]] = {}
    for name, rows in upstreams.items():
        if not name.strip():
            raise ValueError('an upstream name in "upstreams" is empty')
        if not isinstance(rows, dict) or not rows:
            raise ValueError(
                f"upstream {name!r}: its prices must be a non-empty object of family -> prices"
            )
        try:
            own[name] = _parse_families(rows)
        except ValueError as exc:
            raise ValueError(f"upstream {name!r}: {exc}") from None
    unit = doc.get("unit", _UNIT)
    if unit != _UNIT:
        raise ValueError(f'"unit" must be {_UNIT!r} (got {unit!r}); convert the prices')
    source, as_of = doc.get("source", ""), doc.get("as_of", "")
    if not isinstance(source, str) or not isinstance(as_of, str):
        raise ValueError('"source" and "as_of" must be strings')
    return PriceTable(families=table, source=source, as_of=as_of, upstreams=own)


def _parse_families(families: dict[str, object]) -> dict[str, ModelPrice]:
    table: dict[str, ModelPrice] = {}
    for raw_key, row in families.items():
        key = raw_key.strip().lower()
        if not key:
            raise ValueError("a family name is empty")
        if key in table:
            raise ValueError(f"family {raw_key!r} is listed twice (names are case-insensitive)")
        table[key] = _parse_row(raw_key, row)
    return table


def _parse_row(family: str, row: object) -> ModelPrice:
    if not isinstance(row, dict):
        raise ValueError(f"family {family!r}: prices must be an object")
    missing = [f for f in _PRICE_FIELDS if f not in row]
    unknown = sorted(set(row) - set(_PRICE_FIELDS))
    if missing:
        raise ValueError(f"family {family!r}: missing {', '.join(missing)}")
    if unknown:
        raise ValueError(f"family {family!r}: unknown field(s) {', '.join(unknown)}")
    prices: dict[str, Decimal] = {}
    for field in _PRICE_FIELDS:
        value = row[field]
        if isinstance(value, str):  # tolerate "3.75", since some people quote money
            try:
                value = Decimal(value)
            except InvalidOperation:
                value = None
        if not isinstance(value, Decimal) or not value.is_finite() or value < 0:
            raise ValueError(
                f"family {family!r}: {field} must be a non-negative number, got {row[field]!r}"
            )
        prices[field] = value
    return ModelPrice(**prices)
