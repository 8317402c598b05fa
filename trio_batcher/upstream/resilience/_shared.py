"""What a ``Resilience`` shares with the other instances of a cluster, as far as it needs to know.

``cluster.SharedState`` implements it and hands itself to ``Resilience.sharing`` for as long
as its ``run()`` runs (the Redis link is open only then); the resilience layer knows nothing
of Redis. The other direction needs no protocol: the cluster calls ``Resilience``'s public
``adopt_cooldown`` with the cooldowns other instances opened.
"""

from __future__ import annotations

from typing import Protocol

from ._aimd import AdaptiveController
from ._cooldown import CooldownReason

__all__ = ["SharedResilience"]


class SharedResilience(Protocol):
    @property
    def adaptive(self) -> AdaptiveController | None:
        """The cluster's adaptive limit, which decides instead of this process's while
        shared; ``None`` when the cluster keeps none (``BATCH_ADAPTIVE`` off)."""
        ...

    def cooldown_opened(self, scope: str | None, seconds: float, reason: CooldownReason) -> None:
        """This process opened (or extended) a cooldown of ``seconds`` for ``scope`` (a
        model, or ``None`` for every call): hold the other instances too. Called where the
        failure is classified, so it must not wait (queue it) and must not raise."""
        ...

    def request_started(self) -> None:
        """A request made its first attempt: it earns the cluster's retry budget. Must not
        wait and must not raise."""
        ...

    async def spend_retry(self) -> bool:
        """Take one retry from the cluster's budget (a local one while the cluster cannot be
        asked); ``False`` when it is spent. Asked only for a retry the policy and the
        deadline allow."""
        ...
