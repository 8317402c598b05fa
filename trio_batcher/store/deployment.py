"""Which deployment a gateway is, so that deployments sharing a data directory keep apart.

Two gateways on one host share the default ``DATA_DIR`` (``~/.local/share/trio-batcher``).
Were their state one pool, each would poll, purge and serve the other's batches, files and
stored responses -- on its own upstream, with its own key. So every stored row records the
deployment it belongs to, and a gateway reads, polls and purges only its own: separate
namespaces in one directory, rather than a refusal to start, because a real gateway and a
``serve --simulate`` one beside it is a normal thing to run.

The id is ``DEPLOYMENT_ID`` when set (the way to keep one namespace across a key rotation
or a new base URL); else the upstream's identity: the normalised ``ANTHROPIC_BASE_URL`` and
a 12-hex-digit SHA-256 fingerprint of ``ANTHROPIC_API_KEY`` -- never the key, and nothing a
key can be recovered from. ``serve --simulate`` sets ``simulated`` (``simulated-<id>`` with
a ``DEPLOYMENT_ID``), whatever port its in-process simulator took, so a restart keeps its
namespace; ``simulated`` ids are refused for a real upstream (``cli``). A configured id may be a derived
one, as logged at startup: that is how a gateway whose key was rotated takes the old
key's namespace over.

Rows stored before deployments were recorded belong to none (``deployment = ''``). The
first real (not simulated) deployment to open the store adopts them; a simulated one never
does, so a ``serve --simulate`` started first cannot take a real deployment's batches.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, final
from urllib.parse import urlsplit, urlunsplit

if TYPE_CHECKING:
    from ..settings import Settings

__all__ = ["LEGACY", "SIMULATED", "Deployment", "deployment_of", "is_simulated", "simulated_id"]

SIMULATED: Final = "simulated"
LEGACY: Final = ""  # the deployment of rows stored before deployments were recorded
_FINGERPRINT_HEX: Final = 12
_DEFAULT_PORTS: Final = {"http": 80, "https": 443}
_UNSAFE: Final = re.compile(r"[^A-Za-z0-9._-]+")


@final
@dataclass(frozen=True)
class Deployment:
    """A namespace of stored state. ``adopts_legacy``: rows stored before namespaces
    existed become this deployment's (never for a simulated one)."""

    id: str
    adopts_legacy: bool = False

    @property
    def simulated(self) -> bool:
        return is_simulated(self.id)

    @property
    def slug(self) -> str:
        """A directory name of its own (its poller lock and spool files): readable, and
        unique by a digest of the whole id."""
        digest = hashlib.sha256(self.id.encode()).hexdigest()[:12]
        readable = _UNSAFE.sub("_", self.id.split("://", 1)[-1]).strip("_.")[:40]
        return f"{readable}-{digest}" if readable else digest


def is_simulated(deployment_id: str | None) -> bool:
    return deployment_id is not None and (
        deployment_id == SIMULATED or deployment_id.startswith(SIMULATED + "-")
    )


def simulated_id(configured: str | None) -> str:
    """The id of ``serve --simulate``: ``simulated``, or ``simulated-<DEPLOYMENT_ID>`` so
    two simulated gateways can be told apart too."""
    return SIMULATED if not configured else f"{SIMULATED}-{configured}"


def key_fingerprint(api_key: str | None) -> str:
    """A short SHA-256 fingerprint of the upstream key (``nokey`` without one)."""
    if not api_key:
        return "nokey"
    return hashlib.sha256(api_key.encode()).hexdigest()[:_FINGERPRINT_HEX]


def normalised_url(base_url: str) -> str:
    """Scheme and host lower-cased, a default port and trailing slashes dropped: spellings
    of one upstream give one id."""
    parts = urlsplit(base_url.strip())
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    if ":" in host:
        host = f"[{host}]"
    port = parts.port
    netloc = host if port is None or port == _DEFAULT_PORTS.get(scheme) else f"{host}:{port}"
    return urlunsplit((scheme, netloc, parts.path.rstrip("/"), "", ""))


def deployment_of(settings: Settings) -> Deployment:
    """The deployment ``settings`` describe."""
    configured = settings.deployment_id
    if configured:
        return Deployment(configured, adopts_legacy=not is_simulated(configured))
    derived = f"{normalised_url(settings.anthropic_base_url)}#{key_fingerprint(settings.anthropic_api_key)}"
    return Deployment(derived, adopts_legacy=True)
