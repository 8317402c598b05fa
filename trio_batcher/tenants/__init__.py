"""Tenants: who a request is, and what it may use -- the data and the pure parts.

This package holds what the request path and the gate will enforce, and nothing that
enforces it: no module here imports the edge, the pipeline or the gate.

How the pieces fit (what the app will wire):

- ``TenantsWatcher(settings.tenants_file, proxy_api_keys=settings.proxy_api_keys)`` is built
  at startup (a bad file raises ``TenantsFileError``) and run in the app's lifetime nursery
  (``await nursery.start(watcher.run)``): SIGHUP or a change of the file swaps in a new
  ``TenantDirectory``; a refused file is logged and the old one stays.
- Per request: ``tenant = watcher.directory.lookup(client_key)`` (None: 401), then
  ``tenant.allows_model(model)``, then ``await check_budget(spend_store, tenant,
  time.time())`` (``OverBudget``: 429 ``insufficient_quota``), then
  ``rate_limits.try_charge(tenant, estimated_tokens)`` (``Limited``: 429 with
  ``Retry-After`` and the limit named). The gate reads ``tenant.weight``,
  ``tenant.max_inflight`` and ``tenant.max_queue``. When usage is known:
  ``charge.settle(actual_tokens)`` and ``await spend_store.add(tenant.name, usd,
  time.time())``; a request that never reached the upstream: ``charge.refund()``.
- ``SQLiteSpendStore(resolve_data_dir(settings.data_dir))`` keeps spend across restarts
  (``cluster.RedisSpendStore(link)`` with ``REDIS_URL``, one total for every instance).
- ``SpendLedger(store)`` keeps the request path off the store: ``ledger.set_tenants(
  watcher.directory)`` at start and after each reload, ``nursery.start(ledger.run)``, then
  per request ``ledger.over_budget(tenant)`` and ``ledger.charge(tenant.name, usd)``, both
  synchronous, in place of ``check_budget`` and ``spend_store.add``.
- Metrics label by ``tenant.name`` only, bounded by ``directory.names()``; keys are never
  kept anywhere (``model``: only SHA-256 digests).
"""

from __future__ import annotations

from .buckets import Charge as Charge
from .buckets import Limited as Limited
from .buckets import LimitName as LimitName
from .buckets import TenantRateLimits as TenantRateLimits
from .buckets import TokenBucket as TokenBucket
from .directory import TenantDirectory as TenantDirectory
from .directory import build_directory as build_directory
from .directory import proxy_key_digests as proxy_key_digests
from .keys_edit import AddedKey as AddedKey
from .keys_edit import KeysEditError as KeysEditError
from .keys_edit import add_key as add_key
from .keys_edit import generate_key as generate_key
from .keys_file import TenantsFileError as TenantsFileError
from .keys_file import load_tenants as load_tenants
from .keys_file import parse_tenants as parse_tenants
from .keys_file import read_tenants_file as read_tenants_file
from .ledger import LedgerStatistics as LedgerStatistics
from .ledger import SpendLedger as SpendLedger
from .ledger import TenantSpend as TenantSpend
from .model import ANONYMOUS as ANONYMOUS
from .model import Budget as Budget
from .model import BudgetPeriod as BudgetPeriod
from .model import Tenant as Tenant
from .model import hash_key as hash_key
from .reload import TenantsWatcher as TenantsWatcher
from .reload import WatcherStatistics as WatcherStatistics
from .spend import MemorySpendStore as MemorySpendStore
from .spend import OverBudget as OverBudget
from .spend import SpendStore as SpendStore
from .spend import StoreUnavailable as StoreUnavailable
from .spend import check_budget as check_budget
from .sqlite_spend import SQLiteSpendStore as SQLiteSpendStore

__all__ = [
    "ANONYMOUS",
    "AddedKey",
    "Budget",
    "BudgetPeriod",
    "Charge",
    "KeysEditError",
    "LedgerStatistics",
    "LimitName",
    "Limited",
    "MemorySpendStore",
    "OverBudget",
    "SQLiteSpendStore",
    "SpendLedger",
    "SpendStore",
    "StoreUnavailable",
    "Tenant",
    "TenantDirectory",
    "TenantRateLimits",
    "TenantSpend",
    "TenantsFileError",
    "TenantsWatcher",
    "TokenBucket",
    "WatcherStatistics",
    "add_key",
    "build_directory",
    "check_budget",
    "generate_key",
    "hash_key",
    "load_tenants",
    "parse_tenants",
    "proxy_key_digests",
    "read_tenants_file",
]
