"""``trio-batcher keys``: add a tenant's key, list the tenants. Never shows a stored key.

``keys add TENANT`` prints the new key alone on stdout (so ``KEY=$(trio-batcher keys add
team-a)`` captures it) and what it did on stderr; the key is shown this once and only its
SHA-256 is written. A running gateway picks the change up within a second (or on SIGHUP).

``keys list`` prints each tenant with its key count and the first 8 hex characters of each
key's digest (enough to tell keys apart, nothing usable), including the tenants that
``PROXY_API_KEYS`` keys become when that variable is set.

The file is ``--file PATH``, else ``TENANTS_FILE``. Errors are one line on stderr and exit
code 2, like the rest of the CLI.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from typing import Any, Final

from ..settings import header_secrets
from .keys_edit import KeysEditError, add_key
from .keys_file import TenantsFileError, load_tenants

__all__ = ["add_keys_parser", "run_keys"]

_PROG: Final = "trio-batcher"


def _weight(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {raw!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {raw!r}")
    return value


def add_keys_parser(subparsers: Any) -> None:
    """Add ``keys`` to the CLI's subcommands (``subparsers`` from ``add_subparsers()``)."""
    keys = subparsers.add_parser(
        "keys",
        help="add tenants' keys to the tenants file, list the tenants",
        description=(
            "Manage the tenants file (TENANTS_FILE): keys are stored as SHA-256 digests only."
        ),
    )
    keys.set_defaults(log_level="warning")
    actions = keys.add_subparsers(dest="keys_command", required=True, metavar="ACTION")
    add = actions.add_parser(
        "add",
        help="generate a key for TENANT (created if new) and print it once",
        description=(
            "Generate a key for TENANT, print it once on stdout, and store only its SHA-256 in "
            "the tenants file (created if missing; the rest of the file is kept)."
        ),
    )
    add.add_argument("tenant", metavar="TENANT")
    add.add_argument("--weight", type=_weight, default=None, help="set the tenant's weight (> 0)")
    listing = actions.add_parser("list", help="tenants, key counts and digest prefixes")
    for parser in (add, listing):
        parser.add_argument(
            "--file", metavar="PATH", default=None, help="the tenants file (default $TENANTS_FILE)"
        )


def run_keys(args: argparse.Namespace) -> int:
    """Run ``keys add`` or ``keys list``; returns the exit status."""
    path = args.file or os.environ.get("TENANTS_FILE", "").strip()
    if not path:
        return _error("name the tenants file with --file PATH or TENANTS_FILE")
    if args.keys_command == "add":
        return _add(path, args.tenant, args.weight)
    return _list(path)


def _add(path: str, tenant: str, weight: float | None) -> int:
    try:
        added = add_key(path, tenant, weight=weight)
    except KeysEditError as exc:
        return _error(str(exc))
    what = "created tenant" if added.created_tenant else "added a key to tenant"
    print(added.key, flush=True)
    print(
        f"{_PROG}: {what} {added.tenant!r} in {added.path} (sha256 {added.digest[:8]}...). "
        "The key above is shown only this once; a running gateway picks it up within a "
        "second, or on SIGHUP.",
        file=sys.stderr,
    )
    return 0


def _list(path: str) -> int:
    try:
        proxy_keys = header_secrets(os.environ.get("PROXY_API_KEYS", ""))
    except ValueError as exc:
        return _error(f"PROXY_API_KEYS: {exc}")
    if not os.path.exists(path):
        return _error(f"{path}: no such file (`keys add TENANT --file {path}` creates it)")
    try:
        directory = load_tenants(path, proxy_api_keys=proxy_keys)
    except TenantsFileError as exc:
        return _error(str(exc))
    rows = [("TENANT", "KEYS", "WEIGHT", "FROM", "KEY SHA-256 PREFIXES")]
    for tenant in directory:
        prefixes = " ".join(sorted(d[:8] for d in tenant.key_hashes)) or "-"
        origin = {"file": "file", "proxy_api_keys": "PROXY_API_KEYS"}.get(tenant.origin, "-")
        rows.append(
            (tenant.name, str(len(tenant.key_hashes)), f"{tenant.weight:g}", origin, prefixes)
        )
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for row in rows:
        print("  ".join(row[i].ljust(widths[i]) for i in range(4)) + "  " + row[4])
    if not directory.auth_required:
        print(
            f"{_PROG}: no key is configured: authentication is off and every caller is 'anonymous'",
            file=sys.stderr,
        )
    return 0


def _error(message: str) -> int:
    print(f"{_PROG}: error: {message}", file=sys.stderr)
    return 2
