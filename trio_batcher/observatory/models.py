"""The observatory per model: which model names earn an entry of their own, and each
entry's all-time totals (requests, errors, tokens, cost).

Model names come from clients, so they are bounded here: a name earns its own entry only
once the upstream has answered a request for it (or it is a model the gateway knows); until
then, and past ``max_models``, it is counted in the shared ``(other)`` entry. Otherwise a
hundred requests naming models that do not exist would use up every entry and push real
models out of the breakdown. Requests refused before any model was checked are ``(none)``.

The registry calls :meth:`ModelBook.entry` under its own lock; nothing here locks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from typing import Final, final

from .pricing import ModelPrice, PriceTable, TokenUsage

__all__ = ["NO_MODEL", "OTHER_MODELS", "ModelBook", "ModelStatistics", "ModelTotals"]

NO_MODEL: Final = "(none)"
OTHER_MODELS: Final = "(other)"
_RESERVED: Final = frozenset({NO_MODEL, OTHER_MODELS})
_MAX_MODEL_NAME: Final = 128


@final
@dataclass(frozen=True, slots=True)
class ModelStatistics:
    """All-time totals for one model name (or ``(none)`` / ``(other)``)."""

    requests: int
    errors: int
    input_tokens: int
    output_tokens: int
    cache_read: int
    cache_write: int
    cost_usd: Decimal
    priced: bool


@final
class ModelTotals:
    """One entry's mutable counters (also the registry's all-model and unpriced sums)."""

    __slots__ = (
        "cache_read",
        "cache_write",
        "cost",
        "errors",
        "input",
        "output",
        "price",
        "priced",
        "requests",
        "shared",
    )

    def __init__(self, price: ModelPrice | None, *, priced: bool, shared: bool = False) -> None:
        self.price = price
        self.priced = priced
        self.shared = shared  # the (other) entry: many names, so no single price
        self.requests = self.errors = 0
        self.input = self.output = self.cache_read = self.cache_write = 0
        self.cost = Decimal(0)

    def add_tokens(self, tokens: TokenUsage) -> None:
        self.input += tokens.input
        self.output += tokens.output
        self.cache_read += tokens.cache_read
        self.cache_write += tokens.cache_write

    def frozen(self) -> ModelStatistics:
        return ModelStatistics(
            requests=self.requests,
            errors=self.errors,
            input_tokens=self.input,
            output_tokens=self.output,
            cache_read=self.cache_read,
            cache_write=self.cache_write,
            cost_usd=self.cost,
            priced=self.priced,
        )


@final
class ModelBook:
    """The per-model entries, bounded as the module docstring says.

    Args:
      pricing: where a new entry's price comes from.
      max_models: distinct names with an entry of their own; later ones share ``(other)``.
      known_model: whether a name is a real model before the upstream has answered for it.
    """

    def __init__(
        self, pricing: PriceTable, *, max_models: int, known_model: Callable[[str], bool]
    ) -> None:
        self._pricing = pricing
        self._max_models = max(1, max_models)
        self._known_model = known_model
        self._named = 0  # entries of their own, (none) and (other) aside
        self._entries: dict[str, ModelTotals] = {}

    def entry(self, model: str | None, *, answered: bool) -> tuple[str, ModelTotals]:
        """The name a request is counted under, and its entry (created when first used).

        ``answered``: the upstream took a request for ``model``, so the name is real.
        """
        if model is None:
            entry = self._entries.get(NO_MODEL)
            if entry is None:
                entry = self._entries[NO_MODEL] = ModelTotals(None, priced=False)
            return NO_MODEL, entry
        name = model[:_MAX_MODEL_NAME]
        if name not in _RESERVED:  # a client's "(other)" must not pose as the shared entry
            entry = self._entries.get(name)
            if entry is not None:
                return name, entry
            if self._named < self._max_models and (answered or self._known_model(model)):
                price = self._pricing.price_for(model)
                entry = self._entries[name] = ModelTotals(price, priced=price is not None)
                self._named += 1
                return name, entry
        entry = self._entries.get(OTHER_MODELS)
        if entry is None:
            # priced until an unpriced model lands here
            entry = self._entries[OTHER_MODELS] = ModelTotals(None, priced=True, shared=True)
        return OTHER_MODELS, entry

    def statistics(self) -> dict[str, ModelStatistics]:
        return {name: entry.frozen() for name, entry in self._entries.items()}
