"""trio-batcher: an OpenAI-compatible gateway in front of Anthropic's Messages API.

The public surface: build an app with ``create_app(Settings(...))`` and serve it with
``serve_app`` (or any ASGI server with a trio worker); the pure translation functions live in
``trio_batcher.translation.openai_chat``. ``trio_batcher.simulator`` is the testing package
(as ``trio.testing`` is trio's): a simulated Anthropic upstream (``run_simulator``) for
``serve --simulate``, ``simulate`` and tests, which the gateway itself never imports.
"""

from __future__ import annotations

from .app import create_app as create_app
from .errors import ProxyError as ProxyError
from .serving import serve_app as serve_app
from .settings import Settings as Settings
from .settings import SettingsError as SettingsError

__all__ = ["ProxyError", "Settings", "SettingsError", "create_app", "serve_app"]
__version__ = "0.1.0"
