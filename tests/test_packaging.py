"""The wheel carries every package, the price table and the pages."""

from __future__ import annotations

import pathlib
import tomllib

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_every_python_package_is_listed_for_the_wheel() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = {
        ".".join(path.parent.relative_to(ROOT).parts)
        for path in (ROOT / "trio_batcher").rglob("__init__.py")
    }
    assert found <= set(config["packages"])
    assert config["package-dir"] == {"trio_batcher.visuals": "visuals"}
    for page in ("index", "batching", "observability", "backpressure", "results"):
        assert (ROOT / "visuals" / f"{page}.html").is_file()
