"""Small arithmetic on figures that may be missing (``None``), shared by the scenarios."""

from __future__ import annotations

__all__ = ["delta", "ms_per", "ratio", "round3"]


def delta(a: float | None, b: float | None) -> float | None:
    """``b - a``, or ``None`` if either is missing."""
    return None if a is None or b is None else b - a


def ratio(a: float, b: float) -> float | None:
    """``b / a``, or ``None`` when ``a`` is not positive."""
    return None if a <= 0 else b / a


def round3(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def ms_per(cpu_seconds: float | None, count: int) -> float | None:
    """CPU seconds per item, in milliseconds (``None`` without a measurement or items)."""
    return None if cpu_seconds is None or not count else round(cpu_seconds / count * 1000.0, 3)
