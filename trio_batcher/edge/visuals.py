"""The pages under ``/visuals/`` and ``/dashboard``: where they are, and which files count.

They ship inside the wheel as ``trio_batcher.visuals``; an editable install serves a
source checkout's top-level ``visuals/`` instead, minus the scripts that build their data.
The recorded runs the pages draw (``visuals/data/``, a megabyte of benchmark reports) stay
in the repository: an installed wheel has no ``data/``, its ``/visuals/data/...`` answers a
404 that says so, and the pages show "No recorded data" (``assets/common.js``).
"""

from __future__ import annotations

import importlib.util
import mimetypes
from pathlib import Path
from typing import Final

import trio
from quart import Response

from ..errors import ProxyError

__all__ = ["visual_file"]


# What the pages are made of; a source checkout's visuals/ also holds the scripts that
# build their data, which are not for serving.
_VISUAL_SUFFIXES: Final = frozenset({".html", ".js", ".json", ".css", ".svg", ".png"})


def _visuals_root() -> Path | None:
    """Where the pages are: packaged as ``trio_batcher.visuals``, or a source checkout's
    top-level ``visuals/`` (editable installs).

    ``trio_batcher.visuals`` has no ``__init__.py``: it is a namespace package, for which
    ``importlib.resources.files`` answers a ``MultiplexedPath`` whose ``str`` is no path (on
    Python 3.11 an installed wheel served no page at all). Its spec's search locations are
    the directories themselves, from a wheel and from an editable install's finder alike.
    """
    try:
        spec = importlib.util.find_spec("trio_batcher.visuals")
    except ModuleNotFoundError:
        spec = None
    for location in (spec and spec.submodule_search_locations) or ():
        if Path(location).is_dir():
            return Path(location)
    checkout = Path(__file__).resolve().parent.parent.parent / "visuals"
    return checkout if checkout.is_dir() else None


async def visual_file(name: str) -> Response:
    root = _visuals_root()
    if root is None:
        raise ProxyError(404, "The visuals are not installed.", code="not_found")
    try:
        path = (root / name).resolve()
        found = (
            path.suffix in _VISUAL_SUFFIXES
            and path.is_file()
            and path.is_relative_to(root.resolve())
        )
    except (ValueError, OSError):  # a NUL in the name, a name too long
        found = False
    if not found:
        if name.startswith("data/") and not (root / "data").is_dir():
            raise ProxyError(
                404,
                f"No recorded data: /visuals/{name}. The recorded runs stay in the "
                "repository (visuals/data/); the installed package carries none.",
                code="not_found",
            )
        raise ProxyError(404, f"No such page: /visuals/{name}.", code="not_found")
    # Read whole rather than streamed with send_file: the pages are small, and the file
    # send_file opens is never closed when nothing reads the body (a HEAD, a client that
    # leaves), one file descriptor lost per such request.
    content = await trio.Path(path).read_bytes()
    mimetype = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    return Response(content, mimetype=mimetype, headers={"Cache-Control": "no-cache"})
