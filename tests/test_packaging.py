"""The wheel carries the gateway, the price table and the pages, and nothing of the lab.

The benchmark lab is its own distribution (``bench/``) and the recorded runs
(``visuals/data/``) stay in the repository. The simulator ships, as the testing package
``trio_batcher.simulator`` (``trio.testing`` is the model): ``serve --simulate``,
``simulate`` and tests import it, serving does not -- checked on the import graph, on
``import trio_batcher.asgi`` in a fresh interpreter, and on a real ``serve`` process that
answers requests and then lists what it loaded.
"""

from __future__ import annotations

import ast
import json
import signal
import subprocess
import sys
import time
import tomllib
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from email.parser import Parser
from pathlib import Path

import httpx2
import pytest
from support import clean_env, free_port
from wheel_support import build_wheel, unpacked_wheel

from trio_batcher.cli import main

ROOT = Path(__file__).resolve().parent.parent
# What serving must never load: the simulator (a testing package) and the lab.
_FORBIDDEN = ("trio_batcher.simulator", "trio_batcher.bench", "trio_batcher_bench")
# What importing the app adds: an editable install of the lab (the nox sessions make one)
# loads its import hook (``__editable___trio_batcher_bench_..._finder``) when the
# interpreter starts, before and whatever the gateway imports.
_LOADED = (
    "import json, sys\n"
    "before = set(sys.modules)\n"
    "import trio_batcher.asgi\n"
    "print(trio_batcher.__file__)\n"
    "print(json.dumps([m for m in sys.modules if m not in before\n"
    "                  and ('bench' in m or 'simulat' in m)]))\n"
)
# Runs the command line, then writes every module the process loaded to argv[1] as it exits.
_SERVE_AND_DUMP = (
    "import atexit, json, sys\n"
    "def _dump():\n"
    "    with open(sys.argv[1], 'w') as out:\n"
    "        json.dump(sorted(sys.modules), out)\n"
    "atexit.register(_dump)\n"
    "from trio_batcher.cli import main\n"
    "main(sys.argv[2:])\n"
)
HELLO = {"model": "claude-sonnet-4-5", "messages": [{"role": "user", "content": "Hello"}]}


def _forbidden(modules: list[str]) -> list[str]:
    return [m for m in modules if m.startswith(_FORBIDDEN)]


# -- the configuration ----------------------------------------------------------------------


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
    assert not (ROOT / "trio_batcher" / "bench").exists()
    assert not [p for p in config["packages"] if "bench" in p or p.endswith("visuals.data")]


def test_the_lab_is_a_distribution_of_its_own_and_httpx2_is_not_the_gateways() -> None:
    gateway = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lab = tomllib.loads((ROOT / "bench" / "pyproject.toml").read_text())
    assert lab["project"]["name"] == "trio-batcher-bench"
    assert lab["tool"]["setuptools"]["packages"] == ["trio_batcher_bench"]
    assert (ROOT / "bench" / "trio_batcher_bench" / "__init__.py").is_file()
    needs = {d.split(">")[0].split("=")[0].strip() for d in lab["project"]["dependencies"]}
    assert {"trio-batcher", "httpx2", "rich", "psutil", "py-spy"} <= needs
    runtime = " ".join(gateway["dependencies"])
    for lab_only in ("httpx2", "rich", "psutil", "py-spy"):
        assert lab_only not in runtime
    assert "bench" not in gateway["optional-dependencies"]


# -- the wheel ------------------------------------------------------------------------------


def test_the_wheel_carries_no_lab_and_no_recorded_data(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    wheel = build_wheel(tmp_path_factory)
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (metadata,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        requires = Parser().parsestr(archive.read(metadata).decode()).get_all("Requires-Dist")
    assert not [n for n in names if "bench" in n.split("/")[0] or "/bench/" in n]
    assert not [n for n in names if n.startswith("trio_batcher/visuals/data/")]
    # What it does carry: the gateway, the testing package, the pages, the price table.
    for needed in (
        "trio_batcher/asgi.py",
        "trio_batcher/token_estimate.py",
        "trio_batcher/simulator/__init__.py",
        "trio_batcher/visuals/results.html",
        "trio_batcher/visuals/assets/common.js",
        "trio_batcher/py.typed",
    ):
        assert needed in names
    assert [n for n in names if n.startswith("trio_batcher/data/") and n.endswith(".json")]
    runtime = [r for r in requires or [] if "extra ==" not in r]
    assert not [r for r in runtime if r.startswith(("httpx2", "rich", "psutil", "py-spy"))]


# -- what serving loads ---------------------------------------------------------------------


def test_no_gateway_module_imports_the_simulator_or_the_lab_when_it_is_imported() -> None:
    """Every import a gateway module runs when it is loaded (module and class bodies, not
    functions, not ``if TYPE_CHECKING``) stays out of the simulator and the lab."""
    offenders = []
    package = ROOT / "trio_batcher"
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[1] == "simulator":
            continue
        for imported in _load_time_imports(ast.parse(path.read_text()).body, parts[:-1]):
            if imported.startswith(_FORBIDDEN):
                offenders.append(f"{'/'.join(parts)}.py imports {imported}")
    assert offenders == []


def _load_time_imports(body: list[ast.stmt], package: tuple[str, ...]) -> Iterator[str]:
    for node in body:
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = list(package[: len(package) - node.level + 1]) if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            yield module
            yield from (f"{module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.If):
            if not (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
                yield from _load_time_imports(node.body, package)
            yield from _load_time_imports(node.orelse, package)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody):
                yield from _load_time_imports(block, package)
            for handler in node.handlers:
                yield from _load_time_imports(handler.body, package)
        elif isinstance(node, ast.ClassDef | ast.With):
            yield from _load_time_imports(node.body, package)


def test_importing_the_asgi_app_loads_no_simulator_and_no_lab() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _LOADED],
        capture_output=True,
        text=True,
        timeout=60,
        env=clean_env(),
        check=True,
    )
    where, loaded = done.stdout.splitlines()
    assert Path(where).is_relative_to(ROOT)
    assert json.loads(loaded) == []


def test_the_app_from_the_wheel_loads_no_simulator_and_no_lab(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    """The same, with the installed files: the wheel's contents, not the checkout, on the path."""
    unpacked = unpacked_wheel(tmp_path_factory)
    done = subprocess.run(
        [sys.executable, "-c", _LOADED],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,  # not the checkout: `-c` puts the working directory first on the path
        env=clean_env(PYTHONPATH=str(unpacked)),
        check=True,
    )
    where, loaded = done.stdout.splitlines()
    assert Path(where).is_relative_to(unpacked)
    assert json.loads(loaded) == []


@contextmanager
def _process(args: list[str], env: dict[str, str]) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        args, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=30)


def _wait_healthy(
    url: str, proc: subprocess.Popen[str], path: str = "/health", timeout: float = 30.0
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[1]
        try:
            if httpx2.get(f"{url}{path}", timeout=1).status_code == 200:
                return
        except httpx2.TransportError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"{url} did not become healthy")


def _serve_then_list_modules(args: list[str], env: dict[str, str], dump: Path) -> list[str]:
    """Run ``trio-batcher <args>`` (a ``serve`` on a free port), send it a request through
    each door, a page and ``/metrics``, stop it with SIGTERM: every module it loaded."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-c", _SERVE_AND_DUMP, str(dump), *args, "--port", str(port)]
    with _process(command, env | {"METRICS_ENABLED": "1"}) as proxy:
        _wait_healthy(url, proxy)
        chat = httpx2.post(f"{url}/v1/chat/completions", json=HELLO, timeout=10)
        assert chat.status_code == 200, chat.text
        streamed = httpx2.post(
            f"{url}/v1/chat/completions", json={**HELLO, "stream": True}, timeout=10
        )
        assert streamed.status_code == 200 and "[DONE]" in streamed.text
        native = httpx2.post(f"{url}/v1/messages", json={**HELLO, "max_tokens": 16}, timeout=10)
        assert native.status_code == 200, native.text
        assert httpx2.get(f"{url}/visuals/results.html", timeout=10).status_code == 200
        assert httpx2.get(f"{url}/metrics", timeout=10).status_code == 200
        proxy.send_signal(signal.SIGTERM)
        _, stderr = proxy.communicate(timeout=30)
        assert proxy.returncode == 0, stderr
    loaded: list[str] = json.loads(dump.read_text())
    return loaded


def test_serving_without_simulate_loads_no_simulator_and_no_lab(tmp_path: Path) -> None:
    sim_port = free_port()
    simulator = [sys.executable, "-m", "trio_batcher", "simulate", "--port", str(sim_port)]
    simulator += ["--ttft-ms", "0", "--tokens-per-s", "0"]
    with _process(simulator, clean_env()) as sim:
        _wait_healthy(f"http://127.0.0.1:{sim_port}", sim, "/_sim/stats?recent=0")
        env = clean_env(
            ANTHROPIC_BASE_URL=f"http://127.0.0.1:{sim_port}", ANTHROPIC_API_KEY="sk-ant-x"
        )
        loaded = _serve_then_list_modules(["serve"], env, tmp_path / "modules.json")
    assert "trio_batcher.app" in loaded and "trio_batcher.cli" in loaded
    assert _forbidden(loaded) == []


def test_serve_simulate_loads_the_simulator_and_still_no_lab(tmp_path: Path) -> None:
    """The other side of the test above: the dump does see the simulator when it is used."""
    args = ["serve", "--simulate", "--sim-ttft-ms", "0", "--sim-tokens-per-s", "0"]
    loaded = _serve_then_list_modules(args, clean_env(), tmp_path / "modules.json")
    assert "trio_batcher.simulator" in loaded
    assert [m for m in _forbidden(loaded) if "bench" in m] == []


# -- trio-batcher bench ---------------------------------------------------------------------


def test_bench_without_the_lab_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "trio_batcher_bench", None)  # as if not installed
    with pytest.raises(SystemExit) as stopped:
        main(["bench", "--scenario", "overhead", "--quick"])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert "benchmark lab is not installed" in err
    assert "pip install -e . -e ./bench" in err
    assert "Traceback" not in err


def test_bench_hands_its_flags_to_the_lab(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["bench", "--help"])
    assert stopped.value.code == 0
    usage = capsys.readouterr().out
    assert usage.startswith("usage: trio-batcher bench")
    for flag in ("--scenario", "--quick", "--litellm", "--profile"):
        assert flag in usage
