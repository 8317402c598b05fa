"""The tenants in force: an immutable directory from key digest and from name to ``Tenant``.

How a request finds its tenant (what the edge will do)::

    tenant = directory.lookup(client_key)   # the key from edge.auth.client_key(...)
    if tenant is None: answer 401           # auth is on and the key is unknown or absent

``lookup`` hashes the presented key with SHA-256 and looks the digest up in a dict. That is
safe without a constant-time comparison: the timing of a dict lookup (and of the string
comparison behind it) depends only on the *digest* of what the client sent, and learning
how a stored digest relates to the digest of a guess does not help produce a key with a
chosen digest (SHA-256's preimage resistance). Guessing stays brute force over the key
space, which for a ``tb-`` key is 256 bits. The plaintext key is dropped on return.

Who is who:

- every tenant of the tenants file, with its keys;
- every ``PROXY_API_KEYS`` key that no file tenant lists (its digest), as a tenant of its
  own named ``key-<first 8 hex of its SHA-256>`` (longer when two keys share a prefix),
  with the default share and no limits: the flat key list keeps working, and moving a key
  into the file under a name (``key_sha256 = ["<its digest>"]``) gives it limits;
- when no key is configured anywhere, authentication is off and every request is the
  ``anonymous`` tenant -- whose limits the file may set by declaring a tenant named
  ``anonymous`` without keys.

The directory is never changed in place: a reload builds a new one and swaps the reference
(``reload.TenantsWatcher``), so a request that looked its tenant up keeps a consistent view
for its whole life, and a reader never sees half a reload.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import final

from .model import ANONYMOUS, Tenant, hash_key, proxy_key_tenant_name, unique_prefix_length

__all__ = ["TenantDirectory", "build_directory", "proxy_key_digests"]


@final
class TenantDirectory:
    """Tenants by key digest and by name. Immutable; build with ``build_directory``.

    Iteration yields the tenants in order: the file's, then those of ``PROXY_API_KEYS``,
    then ``anonymous`` (present only when authentication is off).
    """

    __slots__ = ("_auth_required", "_by_digest", "_by_name", "_source")

    def __init__(self, tenants: Sequence[Tenant], *, source: str | None = None) -> None:
        by_name: dict[str, Tenant] = {}
        by_digest: dict[str, Tenant] = {}
        for tenant in tenants:
            if tenant.name in by_name:
                raise ValueError(f"two tenants are named {tenant.name!r}")
            by_name[tenant.name] = tenant
            for digest in tenant.key_hashes:
                if digest in by_digest:
                    raise ValueError(
                        f"tenants {by_digest[digest].name!r} and {tenant.name!r} share the "
                        f"key {digest[:8]}..."
                    )
                by_digest[digest] = tenant
        self._by_name: Mapping[str, Tenant] = MappingProxyType(by_name)
        self._by_digest: Mapping[str, Tenant] = MappingProxyType(by_digest)
        self._auth_required = bool(by_digest)
        self._source = source

    @property
    def auth_required(self) -> bool:
        """True when any key is configured: then a request without a known key is refused."""
        return self._auth_required

    @property
    def source(self) -> str | None:
        """The tenants file it was read from, if any (for logs)."""
        return self._source

    def lookup(self, presented_key: str | None) -> Tenant | None:
        """The tenant a presented key belongs to; None means 401.

        Without authentication every caller is ``anonymous`` (whatever it presents).
        """
        if not self._auth_required:
            return self._by_name[ANONYMOUS]
        if not presented_key:
            return None
        return self._by_digest.get(hash_key(presented_key))

    def lookup_digest(self, digest: str) -> Tenant | None:
        """The tenant of a key digest (``hash_key``), for callers that already hold one."""
        if not self._auth_required:
            return self._by_name[ANONYMOUS]
        return self._by_digest.get(digest)

    def get(self, name: str) -> Tenant | None:
        return self._by_name.get(name)

    def names(self) -> tuple[str, ...]:
        """Every tenant name: the bounded label set for metrics."""
        return tuple(self._by_name)

    def __iter__(self) -> Iterator[Tenant]:
        return iter(self._by_name.values())

    def __len__(self) -> int:
        return len(self._by_name)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __repr__(self) -> str:
        return (
            f"TenantDirectory(tenants={list(self._by_name)!r}, keys={len(self._by_digest)}, "
            f"auth_required={self._auth_required}, source={self._source!r})"
        )


def proxy_key_digests(keys: Sequence[str]) -> tuple[str, ...]:
    """The digests of ``PROXY_API_KEYS``, deduplicated, in order: what a watcher keeps so
    that it can rebuild the directory on every reload without holding a key."""
    return tuple(dict.fromkeys(hash_key(key) for key in keys))


def build_directory(
    file_tenants: Sequence[Tenant],
    proxy_digests: Sequence[str] = (),
    *,
    source: str | None = None,
) -> TenantDirectory:
    """The directory of the file's tenants plus one tenant per ``PROXY_API_KEYS`` digest.

    A digest the file already lists belongs to the file's tenant. When no tenant has a key,
    the ``anonymous`` tenant is added (the file's, if it declares one, else a default one).

    Raises:
      ValueError: a tenant name or key appears twice (the loader refuses these first, with
        the file's wording).
    """
    listed = {digest for tenant in file_tenants for digest in tenant.key_hashes}
    extra = [digest for digest in dict.fromkeys(proxy_digests) if digest not in listed]
    length = unique_prefix_length(extra)
    from_keys = [
        Tenant(
            name=proxy_key_tenant_name(digest, length),
            key_hashes=frozenset({digest}),
            origin="proxy_api_keys",
        )
        for digest in extra
    ]
    tenants = [t for t in file_tenants if t.name != ANONYMOUS]
    tenants.extend(from_keys)
    if not listed and not extra:
        declared = next((t for t in file_tenants if t.name == ANONYMOUS), None)
        tenants.append(declared or Tenant(name=ANONYMOUS, origin="anonymous"))
    return TenantDirectory(tenants, source=source)
