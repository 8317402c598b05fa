"""Which pip extra each cloud kind needs, checked when a configuration names the kind.

The cloud SDKs are optional (``pip install 'trio-batcher[bedrock]'``, ``[vertex]``): a
gateway in front of Anthropic's own API should not carry botocore's 20 MB of service models
or google-auth's dependency tree, and must not import them (``import trio_batcher.asgi``
loads neither; tests/test_packaging.py and tests/test_upstream_kinds.py check it). So
every module of this package imports them inside functions, and the routing layer calls
``require_extra(kind)`` once at start for each kind its configuration names: a missing
extra fails there, naming the pip command, rather than on the first request.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Final, final

__all__ = ["EXTRAS", "MissingExtraError", "require_extra"]

# kind -> (the extra's name, the modules it must make importable, the distribution named)
EXTRAS: Final[Mapping[str, tuple[str, tuple[str, ...], str]]] = {
    "bedrock": (
        "bedrock",
        ("botocore.auth", "botocore.eventstream", "botocore.session"),
        "botocore",
    ),
    "vertex": (
        "vertex",
        ("google.auth", "google.auth.transport.requests"),
        "google-auth[requests]",
    ),
}


@final
class MissingExtraError(RuntimeError):
    """A configured upstream kind whose optional dependencies are not installed."""

    def __init__(self, kind: str, extra: str, missing: str, distribution: str) -> None:
        self.kind = kind
        self.extra = extra
        self.missing = missing
        self.command = f"pip install 'trio-batcher[{extra}]'"
        super().__init__(
            f"upstream kind {kind!r} needs {distribution}, which is not installed "
            f"(cannot import {missing}); install it with: {self.command}"
        )


def require_extra(kind: str) -> None:
    """Import what ``kind`` needs, or raise ``MissingExtraError`` naming the pip command.

    A kind with no extra (``"anthropic"``) needs nothing. Import errors other than a
    missing module (a broken install) propagate as they are.
    """
    entry = EXTRAS.get(kind)
    if entry is None:
        return
    extra, modules, distribution = entry
    for module in modules:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError:
            raise MissingExtraError(kind, extra, module, distribution) from None
