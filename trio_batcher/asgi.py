"""The app for an external ASGI server, configured from the environment.

    hypercorn --worker-class trio --bind 127.0.0.1:8000 --graceful-timeout 30 trio_batcher.asgi:app

Each hypercorn worker process imports this module and runs its own lifespan (its own
pool, windows, gate and metrics). A bad setting ends the worker with the same one-line
message and exit code 2 as ``trio-batcher serve``.
"""

from __future__ import annotations

import sys

from .app import create_app
from .runtime import check_files
from .serving import raise_open_file_limit, tune_gc_for_serving, tune_malloc_for_serving
from .settings import Settings, SettingsError

try:
    _settings = Settings.from_env()
    check_files(_settings)
except SettingsError as exc:  # pragma: no cover - exercised through a subprocess test
    print(f"trio-batcher: error: {exc}", file=sys.stderr)
    raise SystemExit(2) from None

app = create_app(_settings)
tune_gc_for_serving()
tune_malloc_for_serving()
raise_open_file_limit()
