"""The gateway's wheel, built the way ``pip wheel .`` builds it, for the tests that check
what it carries (``test_packaging.py``) and how its pages behave without the recorded runs
(``browser/test_pages_wheel.py``).

The build runs on a copy of the checkout (``pyproject.toml``, ``README.md``, the package,
``visuals/`` with its ``data/``, and ``bench/``), so it leaves no ``build/`` or
``*.egg-info`` behind and proves that the configuration, not an absent directory, keeps the
lab and the recorded runs out. One build per test process.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_SOURCES = ("pyproject.toml", "README.md", "trio_batcher", "visuals", "bench")
_built: dict[str, Path] = {}


def build_wheel(factory: pytest.TempPathFactory) -> Path:
    """The wheel ``pip wheel --no-deps`` makes of the checkout (built once per process)."""
    if "wheel" not in _built:
        work = factory.mktemp("wheel-build")
        source = work / "src"
        source.mkdir()
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build")
        for name in _SOURCES:
            path = ROOT / name
            if not path.exists():
                continue
            if path.is_dir():
                shutil.copytree(path, source / name, ignore=ignore)
            else:
                shutil.copy2(path, source / name)
        pip_wheel = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q"]
        done = subprocess.run(
            [*pip_wheel, "-w", str(work / "dist"), str(source)],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        (wheel,) = (work / "dist").glob("trio_batcher-*.whl")
        _built["wheel"] = wheel
    return _built["wheel"]


def unpacked_wheel(factory: pytest.TempPathFactory) -> Path:
    """The wheel's files as an installed package would have them: a directory to put on
    ``PYTHONPATH`` instead of the checkout (the dependencies come from the environment)."""
    if "unpacked" not in _built:
        target = factory.mktemp("wheel-unpacked")
        with zipfile.ZipFile(build_wheel(factory)) as wheel:
            wheel.extractall(target)
        _built["unpacked"] = target
    return _built["unpacked"]
