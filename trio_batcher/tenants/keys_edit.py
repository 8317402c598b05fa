"""Adding a key to the tenants file: generate it, store its digest, keep the rest of the file.

``tomllib`` only reads, so the file is edited as text, and never blindly:

1. The file as it is must pass ``parse_tenants`` (a broken file is not made worse).
2. It is split at its ``[[tenant]]`` headers, and each piece must parse on its own to the
   tenant the whole file has at that place; otherwise the edit is refused and the file left
   alone. (Only a header line inside a multi-line string could mislead the split, and no
   field of a valid file accepts a string with a line break: the check is a safety net.)
3. Within the tenant's piece only the assignments that change are rewritten
   (``key_sha256``, and ``weight`` when given); an assignment's extent is the fewest lines
   from its start that parse as TOML, so multi-line arrays are replaced whole. A new
   tenant is a piece appended at the end. Everything else -- comments, order, spacing,
   the other tenants -- stays byte for byte (a comment on a replaced line goes with it).
4. The result must parse to exactly the expected tenants before it is written, atomically:
   a temporary file in the same directory, flushed to disk, then ``os.replace``, so the
   gateway's watcher reads the old file or the new one, never half of either. The file's
   permissions are kept (a new file gets ``0o644`` less the umask: it holds no secret).

Two ``keys add`` at the same moment on one file can lose one of the two edits (each
replaces the file it read); run them one after the other.

The key is ``tb-`` followed by 256 random bits (``secrets.token_urlsafe(32)``): the prefix
makes a leaked key recognisable to secret scanners and people. It is returned to the
caller to print once, and exists nowhere else.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import secrets
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Final, final

from .keys_file import TenantsFileError, name_problem, parse_tenants
from .model import ANONYMOUS, Tenant, hash_key

__all__ = ["AddedKey", "KeysEditError", "add_key", "generate_key", "write_atomically"]

KEY_PREFIX: Final = "tb-"

NEW_FILE_HEADER: Final = """\
# trio-batcher tenants (TENANTS_FILE): one [[tenant]] table per tenant.
# Keys are stored as SHA-256 hex digests only: `trio-batcher keys add TENANT` adds one.
# Fields: name, key_sha256, weight, max_inflight, max_queue, rpm, tpm, budget_usd,
# budget_period ("monthly" or "30d"), models (names or fnmatch patterns).
"""

_HEADER: Final = re.compile(r"\s*\[\[\s*tenant\s*\]\]\s*(#.*)?")


@final
class KeysEditError(Exception):
    """The tenants file could not be edited; nothing was written."""


@final
@dataclass(frozen=True)
class AddedKey:
    """A key just added: ``key`` is to be shown once and dropped (not in ``repr``)."""

    tenant: str
    digest: str
    created_tenant: bool
    path: Path
    key: str = dataclasses.field(repr=False)


def generate_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def add_key(path: str | os.PathLike[str], tenant: str, *, weight: float | None = None) -> AddedKey:
    """Generate a key for ``tenant`` (created if new), store its digest in the file at
    ``path`` (created if missing), and set the tenant's ``weight`` if given.

    Raises:
      KeysEditError: the name or weight is refused, the file is unreadable or refused, or it
        cannot be edited in place safely.
    """
    problem = name_problem(tenant)
    if problem:
        raise KeysEditError(f"tenant name {problem}")
    if tenant == ANONYMOUS:
        raise KeysEditError(
            f"{ANONYMOUS!r} is who callers without a key are while no key exists; it has none"
        )
    if weight is not None:
        weight = float(weight)
        if not (math.isfinite(weight) and weight > 0):
            raise KeysEditError(f"--weight must be a finite number > 0, got {weight!r}")
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8") if file.exists() else NEW_FILE_HEADER
    except (OSError, UnicodeDecodeError) as exc:
        raise KeysEditError(f"{file}: cannot read: {exc}") from None
    try:
        before = parse_tenants(text, source=str(file))
    except TenantsFileError as exc:
        raise KeysEditError(f"{exc} (fix the file first; nothing was changed)") from None

    key = generate_key()
    digest = hash_key(key)
    existing = next((t for t in before if t.name == tenant), None)
    if existing is None:
        new_text = _append_tenant(text, tenant, digest, weight)
        target = Tenant(name=tenant, key_hashes=frozenset({digest}), weight=weight or 1.0)
        expected = (*before, target)
    else:
        new_text = _update_tenant(text, before, existing, digest, weight)
        target = dataclasses.replace(
            existing,
            key_hashes=existing.key_hashes | {digest},
            weight=existing.weight if weight is None else weight,
        )
        expected = tuple(target if t.name == tenant else t for t in before)
    try:
        after = parse_tenants(new_text, source=str(file))
    except TenantsFileError as exc:
        raise KeysEditError(
            f"the edited file would be refused ({exc}); nothing was changed"
        ) from None
    if after != expected:
        raise KeysEditError(f"{file}: the edit did not come out as intended; nothing was changed")
    try:
        write_atomically(file, new_text)
    except OSError as exc:
        raise KeysEditError(f"{file}: cannot write: {exc.strerror or exc}") from None
    return AddedKey(tenant, digest, existing is None, file, key)


def write_atomically(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` in one step (through a symlink, the target)."""
    target = Path(os.path.realpath(path))
    try:
        mode = target.stat().st_mode & 0o7777
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o644 & ~umask
    fd, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    if hasattr(os, "O_DIRECTORY"):  # make the rename itself durable (POSIX)
        dir_fd = os.open(target.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


# -- the text edits ----------------------------------------------------------------------


def _format_number(value: float) -> str:
    return str(int(value)) if value.is_integer() else repr(value)


def _format_digests(digests: list[str]) -> str:
    if len(digests) == 1:
        return f'["{digests[0]}"]'
    return "[\n" + "".join(f'    "{d}",\n' for d in digests) + "]"


def _append_tenant(text: str, name: str, digest: str, weight: float | None) -> str:
    lines = ["[[tenant]]", f'name = "{name}"', f"key_sha256 = {_format_digests([digest])}"]
    if weight is not None:
        lines.append(f"weight = {_format_number(weight)}")
    if text and not text.endswith("\n"):
        text += "\n"
    separator = "\n" if text.strip() and not text.endswith("\n\n") else ""
    return text + separator + "\n".join(lines) + "\n"


def _pieces(text: str) -> tuple[list[str], list[list[str]]]:
    """The lines before the first ``[[tenant]]`` header, and each tenant's lines."""
    preamble: list[str] = []
    pieces: list[list[str]] = []
    for line in text.splitlines(keepends=True):
        if _HEADER.fullmatch(line.rstrip("\r\n")):
            pieces.append([line])
        elif pieces:
            pieces[-1].append(line)
        else:
            preamble.append(line)
    return preamble, pieces


def _update_tenant(
    text: str, tenants: tuple[Tenant, ...], tenant: Tenant, digest: str, weight: float | None
) -> str:
    preamble, pieces = _pieces(text)
    index = next(i for i, t in enumerate(tenants) if t.name == tenant.name)
    if len(pieces) != len(tenants) or not all(
        _piece_names(piece) == t.name for piece, t in zip(pieces, tenants, strict=True)
    ):
        raise KeysEditError(
            "cannot edit this tenants file in place safely (its [[tenant]] tables could not "
            "be told apart); nothing was changed. Add the key by hand: generate one, and "
            f"append its SHA-256 hex digest to tenant {tenant.name!r}'s key_sha256"
        )
    piece = pieces[index]
    listed = tomllib.loads("".join(piece))["tenant"][0].get("key_sha256", [])
    piece = _set_field(piece, "key_sha256", _format_digests([*listed, digest]))
    if weight is not None:
        piece = _set_field(piece, "weight", _format_number(weight))
    pieces[index] = piece
    return "".join(preamble) + "".join("".join(p) for p in pieces)


def _piece_names(piece: list[str]) -> str | None:
    try:
        entries = tomllib.loads("".join(piece)).get("tenant", [])
    except tomllib.TOMLDecodeError:
        return None
    if len(entries) != 1:
        return None
    name = entries[0].get("name")
    return name if isinstance(name, str) else None


def _assignment(lines: list[str], field: str) -> tuple[int, int] | None:
    """Where ``field = ...`` is in a tenant's lines: (first, past-the-last) line."""
    start = re.compile(rf"""\s*(?:{field}|"{field}"|'{field}')\s*=""")
    for first in range(1, len(lines)):
        if not start.match(lines[first]):
            continue
        for last in range(first, len(lines)):
            try:
                parsed = tomllib.loads("".join(lines[first : last + 1]))
            except tomllib.TOMLDecodeError:
                continue
            if field in parsed:
                return first, last + 1
        return None
    return None


def _set_field(lines: list[str], field: str, value: str) -> list[str]:
    line = f"{field} = {value}\n"
    where = _assignment(lines, field)
    if where is not None:
        first, end = where
        return [*lines[:first], line, *lines[end:]]
    after = _assignment(lines, "name")
    at = after[1] if after is not None else 1
    if not lines[at - 1].endswith("\n"):
        lines = [*lines[: at - 1], lines[at - 1] + "\n", *lines[at:]]
    return [*lines[:at], line, *lines[at:]]
