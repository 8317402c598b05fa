"""Tokens from characters: about four characters a token, at least one.

The gateway needs an input-token count before the upstream has counted anything (a
tenant's token bucket is charged when a request is admitted, ``pipeline/tenancy.py``); the
simulated upstream counts its usage by the same rule, so in tests and benchmarks the
estimate and the usage the simulator reports agree. The rule lives here, in the gateway,
and the simulator imports it: serving never loads the simulator.
"""

from __future__ import annotations

__all__ = ["tokens_for"]


def tokens_for(chars: int) -> int:
    """About four characters a token, at least one."""
    return max(1, chars // 4)
