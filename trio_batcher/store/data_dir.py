"""Where embedded state lives when ``DATA_DIR`` is not set.

The XDG base directory (``$XDG_DATA_HOME/trio-batcher``, else
``~/.local/share/trio-batcher``): per user, outside any checkout, and the same for every
process of that user, so ``serve --workers N`` shares one store. Created on first use, not
at import or startup, so a gateway that never stores anything never touches the disk.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["resolve_data_dir"]


def resolve_data_dir(configured: str | None) -> Path:
    if configured:
        return Path(configured).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "trio-batcher"
