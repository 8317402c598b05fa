"""Hosting: the app under hypercorn's trio worker in a nursery the caller owns (``server``),
and ``serve --workers N``'s supervisor and its worker processes (``workers``, with the plan
they follow in ``worker_plan``)."""

from __future__ import annotations

from .server import LISTEN_BACKLOG as LISTEN_BACKLOG
from .server import hypercorn_config as hypercorn_config
from .server import raise_open_file_limit as raise_open_file_limit
from .server import serve_app as serve_app
from .server import tidy_heap_periodically as tidy_heap_periodically
from .server import tune_gc_for_serving as tune_gc_for_serving
from .server import tune_malloc_for_serving as tune_malloc_for_serving
from .workers import Supervisor as Supervisor
from .workers import drain_when_supervisor_leaves as drain_when_supervisor_leaves
from .workers import serve_plan as serve_plan

__all__ = [
    "LISTEN_BACKLOG",
    "Supervisor",
    "drain_when_supervisor_leaves",
    "hypercorn_config",
    "raise_open_file_limit",
    "serve_app",
    "serve_plan",
    "tidy_heap_periodically",
    "tune_gc_for_serving",
    "tune_malloc_for_serving",
]
