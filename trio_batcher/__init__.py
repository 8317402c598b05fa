"""trio-batcher: an OpenAI-compatible gateway in front of Anthropic's Messages API.

The public surface: build an app with ``create_app(Settings(...))`` and serve it with
``serve_app`` (or any ASGI server with a trio worker); run the simulated upstream with
``run_simulator``; the pure translation functions live in ``trio_batcher.translation.openai_chat``.
"""

from __future__ import annotations

from .app import create_app as create_app
from .errors import ProxyError as ProxyError
from .serving import serve_app as serve_app
from .settings import Settings as Settings
from .settings import SettingsError as SettingsError

__all__ = ["ProxyError", "Settings", "SettingsError", "create_app", "serve_app"]
__version__ = "0.1.0"
