"""The pages as an installed wheel has them: no recorded runs, and the pages say so.

The recorded benchmark runs (``visuals/data/``) stay in the repository; the wheel carries the
pages and their assets only. Here the proxy runs from the wheel's own files (built by
``wheel_support``, on ``PYTHONPATH`` instead of the checkout): the live dashboard works as
ever, the index loads, and each page drawn from a recording says there is none instead of
showing a load error -- served, and opened from the installed files.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from wheel_support import unpacked_wheel

pytestmark = pytest.mark.browser

_SERVING = re.compile(r"serving OpenAI-compatible API on (http://\S+)/v1")
_RECORDED = ("results", "batching", "backpressure")


@pytest.fixture(scope="module")
def wheel_proxy(browser: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``trio-batcher serve --simulate`` from the wheel's files, metrics on: its base URL."""
    unpacked = unpacked_wheel(tmp_path_factory)
    run_dir = tmp_path_factory.mktemp("wheel-run")  # not the checkout, which -m puts first
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BATCH_", "METRICS_"))}
    env.update(PYTHONPATH=str(unpacked), METRICS_ENABLED="1")
    log_path = run_dir / "proxy.log"
    cmd = [sys.executable, "-m", "trio_batcher", "serve", "--simulate", "--port", "0"]
    with log_path.open("w") as log:
        proc = subprocess.Popen(cmd, cwd=run_dir, env=env, stderr=log, stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not (found := _SERVING.search(log_path.read_text())):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the proxy did not start:\n{log_path.read_text()}")
            time.sleep(0.05)
        yield found.group(1)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_the_wheel_serves_no_recorded_data_and_says_why(wheel_proxy: str) -> None:
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(f"{wheel_proxy}/visuals/data/results.json", timeout=10)
    assert missing.value.code == 404
    body = missing.value.read().decode()
    missing.value.close()
    assert "No recorded data" in body and "repository" in body


@pytest.mark.parametrize("page", _RECORDED)
def test_served_from_the_wheel_a_recorded_page_says_there_is_no_recorded_data(
    wheel_proxy: str, open_page: Any, page: str
) -> None:
    opened = open_page(f"{wheel_proxy}/visuals/{page}.html", ready="[data-testid=no-data]")
    text = opened.text("no-data")
    assert text.startswith("No recorded data") and "pip install -e ./bench" in text
    assert opened.page.get_by_test_id("load-error").count() == 0
    opened.screenshot(f"wheel-{page}")


def test_from_the_wheel_the_index_and_the_live_dashboard_still_load(
    wheel_proxy: str, open_page: Any
) -> None:
    index = open_page(f"{wheel_proxy}/visuals/")
    index.assert_clean()
    dashboard = open_page(f"{wheel_proxy}/dashboard", ready="body[data-mode='live']")
    dashboard.assert_clean()


@pytest.mark.parametrize("page", _RECORDED)
def test_opened_from_the_installed_files_a_recorded_page_says_there_is_no_recorded_data(
    tmp_path_factory: pytest.TempPathFactory, open_page: Any, page: str
) -> None:
    pages: Path = unpacked_wheel(tmp_path_factory) / "trio_batcher" / "visuals"
    assert not (pages / "data").exists()
    opened = open_page((pages / f"{page}.html").as_uri(), ready="[data-testid=no-data]")
    assert opened.text("no-data").startswith("No recorded data")
