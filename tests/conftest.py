from __future__ import annotations

import logging

import pytest

# The outbound client logs every request at INFO; keep test output readable.
for _name in ("httpx", "httpx2", "httpcore", "httpcore2"):
    logging.getLogger(_name).setLevel(logging.WARNING)


@pytest.fixture
def anyio_backend() -> str:
    return "trio"
