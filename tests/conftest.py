from __future__ import annotations

import logging

import pytest

# The outbound client logs every request at INFO; keep test output readable.
for _name in ("httpx", "httpx2", "httpcore", "httpcore2"):
    logging.getLogger(_name).setLevel(logging.WARNING)


@pytest.fixture
def anyio_backend() -> str:
    return "trio"


@pytest.fixture(autouse=True)
def _data_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test's embedded state (stored Responses) in a directory of its own, never in
    the user's ``~/.local/share``; subprocesses inherit it through the environment."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path_factory.mktemp("xdg-data")))
