"""A simulated Anthropic Messages API: ``trio-batcher serve --simulate`` and the benchmark's
upstream, faithful enough that the official ``anthropic`` SDK parses everything it sends.

The testing package, as ``trio.testing`` is trio's: public, shipped, and imported only by
``serve --simulate``, ``simulate`` and tests -- serving without ``--simulate`` never loads it
(``tests/test_packaging.py``). It depends on the gateway (``serving``, ``json_text``,
``token_estimate``), never the other way round.

See ``app.py`` for the request flow and the routes (``messages_route.py`` for
``POST /v1/messages``), ``validation.py`` (its parts in the ``*_checks.py`` modules, and
``betas.py`` for what ``anthropic-beta`` unlocks) for what it refuses, ``replies.py`` (and
its ``reply_*.py`` parts) for what it answers, ``faults.py`` for fault injection (including
``times=N`` directives that fail only the first N requests), ``ratelimit.py`` for the
enforced request/token rate limits, ``overload.py`` for 529 overload windows, ``stats.py``
for ``/_sim/stats`` and ``received.py`` for ``/_sim/requests``, the log of what the
simulator received (method, path, query, every header, the body) that lets a gateway test
assert what reached the upstream.

The same app also serves Claude as the clouds do, through the same Messages core:
Amazon Bedrock (``bedrock_route.py``: SigV4 checked with botocore's signer, AWS
event-stream framing) and Google Vertex AI (``vertex_route.py``: rawPredict,
streamRawPredict, count-tokens, and ``POST /token``, an OAuth endpoint for service-account
JWT assertions); ``cloud_errors.py`` says how refusals read on each.
"""

from __future__ import annotations

from .app import SimulatorApp as SimulatorApp
from .app import create_simulator_app as create_simulator_app
from .app import run_simulator as run_simulator
from .config import SimulatorConfig as SimulatorConfig
from .errors import SimulatorError as SimulatorError
from .errors import SimulatorInvalidRequest as SimulatorInvalidRequest
from .faults import Faults as Faults
from .faults import parse_faults as parse_faults
from .latency import schedule as schedule
from .received import ReceivedLog as ReceivedLog
from .received import ReceivedRequest as ReceivedRequest
from .validation import validate_messages_request as validate_messages_request

__all__ = [
    "Faults",
    "ReceivedLog",
    "ReceivedRequest",
    "SimulatorApp",
    "SimulatorConfig",
    "SimulatorError",
    "SimulatorInvalidRequest",
    "create_simulator_app",
    "parse_faults",
    "run_simulator",
    "schedule",
    "validate_messages_request",
]
