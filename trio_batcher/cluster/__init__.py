"""Shared state on Redis: the upstream cap, cooldowns and the retry budget, exactly global.

The primitives, each one module with one job:

- ``connection``: ``open_link(ClusterConfig)`` → ``RedisLink`` (key prefix, per-command
  deadline, scripts, pub/sub); every failure is ``ClusterUnavailable``.
- ``leases``: ``LeaseSemaphore``, the cap leased to instances in blocks (granted locally).
- ``cooldowns``: ``SharedCooldowns``, holds on new calls, and ``CooldownWatch``, which adopts them.
- ``budget``: ``SharedRetryBudget``, the retry budget counted across instances.
- ``instances``: ``InstanceRegistry``, heartbeats and the count of instances alive.
- ``spend``: ``RedisSpendStore``, spend per tenant per hour (the tenants' ``SpendStore``).
- ``fallback``: ``fallback_share`` and ``FallbackState``, what to do while Redis is down.

Per instance by design (not here): the admission gate (``MAX_INFLIGHT``, ``MAX_QUEUE``),
which bounds one process's memory.
"""

from __future__ import annotations

from .budget import SharedRetryBudget as SharedRetryBudget
from .connection import ClusterConfig as ClusterConfig
from .connection import ClusterUnavailable as ClusterUnavailable
from .connection import Link as Link
from .connection import LuaScript as LuaScript
from .connection import RedisLink as RedisLink
from .connection import open_link as open_link
from .cooldowns import CooldownView as CooldownView
from .cooldowns import SharedCooldowns as SharedCooldowns
from .fallback import FallbackState as FallbackState
from .fallback import FallbackStatistics as FallbackStatistics
from .fallback import Mode as Mode
from .fallback import fallback_share as fallback_share
from .instances import InstanceRegistry as InstanceRegistry
from .instances import new_instance_id as new_instance_id
from .leases import LeaseSemaphore as LeaseSemaphore
from .leases import LeaseStatistics as LeaseStatistics
from .spend import RedisSpendStore as RedisSpendStore

__all__ = [
    "ClusterConfig",
    "ClusterUnavailable",
    "CooldownView",
    "FallbackState",
    "FallbackStatistics",
    "InstanceRegistry",
    "LeaseSemaphore",
    "LeaseStatistics",
    "Link",
    "LuaScript",
    "Mode",
    "RedisLink",
    "RedisSpendStore",
    "SharedCooldowns",
    "SharedRetryBudget",
    "fallback_share",
    "new_instance_id",
]
