"""Settings: parsing, validation, secrets, docs coverage, and the CLI's exit-2 contract."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

from trio_batcher.runtime import check_files
from trio_batcher.settings import SPECS, Settings, SettingsError

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_defaults_need_no_environment() -> None:
    settings = Settings.from_env({})
    assert settings == Settings()
    assert settings.anthropic_base_url == "https://api.anthropic.com"
    assert settings.anthropic_version == "2023-06-01"
    assert settings.max_body_bytes == 32 * 1024 * 1024
    assert settings.batch_enabled is False and settings.metrics_enabled is False


def test_environment_values_are_parsed_to_types() -> None:
    settings = Settings.from_env(
        {
            "BATCH_ENABLED": "yes",
            "BATCH_MAX_SIZE": "8",
            "BATCH_MAX_WAIT_MS": "2.5",
            "ANTHROPIC_BASE_URL": "http://127.0.0.1:9000/",
            "PROXY_API_KEYS": "a, b,,c",
            "ANTHROPIC_VERSION": "2026-10-21",
            "UNRELATED": "ignored",
        }
    )
    assert settings.batch_enabled is True
    assert settings.batch_max_size == 8
    assert settings.batch_max_wait_s == 0.0025
    assert settings.anthropic_base_url == "http://127.0.0.1:9000"
    assert settings.proxy_api_keys == ("a", "b", "c")
    assert settings.anthropic_version == "2026-10-21"


def test_overrides_beat_the_environment() -> None:
    settings = Settings.from_env({"BATCH_MAX_SIZE": "8"}, overrides={"BATCH_MAX_SIZE": "3"})
    assert settings.batch_max_size == 3


BAD_VALUES = [
    ("BATCH_MAX_SIZE", "abc", "expected an integer"),
    ("BATCH_MAX_SIZE", "0", "must be >= 1"),
    ("MAX_QUEUE", "-1", "must be >= 0"),
    ("MAX_INFLIGHT", "-5", "must be >= 0"),
    ("BATCH_MAX_WAIT_MS", "-1", "must be >= 0"),
    ("BATCH_MAX_WAIT_MS", "nan", "finite"),
    ("REQUEST_TIMEOUT_S", "0", "must be > 0"),
    ("BATCH_ENABLED", "maybe", "expected a boolean"),
    ("ANTHROPIC_BASE_URL", "not a url", "http(s) URL"),
    ("ANTHROPIC_BASE_URL", "ftp://example.com", "http(s) URL"),
    ("ANTHROPIC_BASE_URL", "http://example.com:99999", "not a valid URL"),
    ("ANTHROPIC_VERSION", "2024-01-01", "expected one of"),
    ("DEFAULT_MODEL", "", "must name a model"),
    ("KEEPALIVE_TIMEOUT_S", "0", "must be > 0"),
    ("DEFAULT_MODEL", "claude sonnet", "no spaces"),
    ("MAX_BODY_BYTES", "0", "must be >= 1"),
    ("PRICING_FILE", "/nonexistent/prices.json", "no such file"),
    ("ANTHROPIC_API_KEY", "sk-ant-\u00e9t\u00e9", "printable ASCII"),
    ("ANTHROPIC_API_KEY", "sk-ant-a\nb", "printable ASCII"),
    ("PROXY_API_KEYS", "k1,cl\u00e9", "printable ASCII"),
    ("METRICS_TOKEN", "t\u00f6ken", "printable ASCII"),
    ("DEPLOYMENT_ID", "team a", "no spaces"),
]


@pytest.mark.parametrize(
    ("name", "value", "problem"), BAD_VALUES, ids=[f"{n}={v}" for n, v, _ in BAD_VALUES]
)
def test_bad_value_names_the_variable_and_the_problem(name: str, value: str, problem: str) -> None:
    with pytest.raises(SettingsError) as info:
        Settings.from_env({name: value})
    assert info.value.name == name
    assert problem in info.value.problem
    assert str(info.value).startswith(f"{name}: ")
    if name in ("ANTHROPIC_API_KEY", "PROXY_API_KEYS", "METRICS_TOKEN"):
        assert value.split(",")[-1] not in str(info.value)


def test_a_malformed_pricing_file_is_a_settings_error(tmp_path: pathlib.Path) -> None:
    # Settings are data (a path that exists): the file is read by the composition root.
    bad = tmp_path / "prices.json"
    bad.write_text('{"families": {"claude-x": {"input": "cheap"}}}')
    settings = Settings.from_env({"PRICING_FILE": str(bad)})
    with pytest.raises(SettingsError) as info:
        check_files(settings)
    assert info.value.name == "PRICING_FILE"


def test_adaptive_concurrency_needs_batching() -> None:
    with pytest.raises(SettingsError) as info:
        Settings.from_env({"BATCH_ADAPTIVE": "1"})
    assert info.value.name == "BATCH_ADAPTIVE"
    assert Settings.from_env({"BATCH_ADAPTIVE": "1", "BATCH_ENABLED": "1"}).batch_adaptive


def test_repr_never_shows_secrets() -> None:
    settings = Settings(
        anthropic_api_key="sk-ant-secret", proxy_api_keys=("pk-1",), metrics_token="mt"
    )
    text = repr(settings) + str(settings)
    assert "sk-ant-secret" not in text and "pk-1" not in text and "mt'" not in text
    assert "<redacted>" in text


def test_every_setting_is_documented() -> None:
    doc = (ROOT / "docs" / "configuration.md").read_text()
    missing = [spec.env for spec in SPECS if f"`{spec.env}`" not in doc]
    assert missing == []


def test_every_setting_has_a_flag_except_secrets() -> None:
    from trio_batcher.cli import build_parser

    help_text = build_parser()._subparsers._group_actions[0].choices["serve"].format_help()  # type: ignore[union-attr]
    for spec in SPECS:
        assert (spec.flag in help_text) is (not spec.secret), spec.env


def _run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in {s.env for s in SPECS}}
    clean.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "trio_batcher", *args],
        env=clean,
        capture_output=True,
        text=True,
        timeout=60,
    )


CLI_FAILURES = [
    (("serve", "--simulate"), {"BATCH_MAX_SIZE": "abc"}, "BATCH_MAX_SIZE"),
    (("serve", "--simulate"), {"MAX_QUEUE": "-3"}, "MAX_QUEUE"),
    (("serve", "--simulate"), {"ANTHROPIC_BASE_URL": "::not a url::"}, "ANTHROPIC_BASE_URL"),
    (("serve", "--simulate", "--batch-max-size", "-2"), {}, "--batch-max-size"),
    (("serve",), {}, "--simulate"),
    (("serve", "--simulate"), {"PRICING_FILE": "/dev/null"}, "PRICING_FILE"),
    (("serve", "--simulate", "--pricing-file", "/dev/null"), {}, "--pricing-file"),
    (("serve", "--simulate"), {"TENANTS_FILE": "/nonexistent/tenants.toml"}, "TENANTS_FILE"),
    (("serve", "--simulate", "--host", "0.0.0.0"), {}, "PROXY_API_KEYS"),
    # A real upstream's state never goes into serve --simulate's namespace.
    (("serve",), {"ANTHROPIC_API_KEY": "sk-ant-x", "DEPLOYMENT_ID": "simulated"}, "DEPLOYMENT_ID"),
    # Checked inside trio (the embedded simulator's config), where exits come out wrapped.
    (("serve", "--simulate", "--port", "0", "--sim-jitter", "2"), {}, "jitter"),
    (("serve", "--simulate", "--port", "0", "--sim-seed", "-1"), {}, "--sim-seed"),
    (("serve", "--simulate", "--port", "0", "--sim-ratelimit-period-s", "0"), {}, "period"),
    (("serve", "--simulate", "--port", "0", "--sim-ttft-ms", "-5"), {}, "--sim-ttft-ms"),
]


@pytest.mark.parametrize(
    ("args", "env", "named"), CLI_FAILURES, ids=[" ".join(a) + str(e) for a, e, _ in CLI_FAILURES]
)
def test_cli_bad_configuration_exits_2_with_one_line(
    args: tuple[str, ...], env: dict[str, str], named: str
) -> None:
    result = _run_cli(*args, env=env)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert named in lines[0]


def test_asgi_module_with_bad_settings_exits_2_with_one_line() -> None:
    clean = {k: v for k, v in os.environ.items() if k not in {s.env for s in SPECS}}
    clean["BATCH_MAX_SIZE"] = "abc"
    result = subprocess.run(
        [sys.executable, "-c", "import trio_batcher.asgi"],
        env=clean,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "trio-batcher: error: BATCH_MAX_SIZE: expected an integer, got 'abc'"
    ]


def test_asgi_module_with_a_bad_tenants_file_exits_2_with_one_line(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "tenants.toml"
    path.write_text('[[tenant]]\nname = "a"\nrpm = 0\n')
    clean = {k: v for k, v in os.environ.items() if k not in {s.env for s in SPECS}}
    clean["TENANTS_FILE"] = str(path)
    result = subprocess.run(
        [sys.executable, "-c", "import trio_batcher.asgi"],
        env=clean,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("trio-batcher: error: TENANTS_FILE: ")
    assert "tenant 'a': rpm: must be >= 1, got 0" in line


def test_the_keep_alive_timeout_reaches_hypercorn_and_nothing_else_times_out_a_read() -> None:
    from trio_batcher.serving import hypercorn_config

    config = hypercorn_config("127.0.0.1", 0, keep_alive_timeout=65.0)
    assert (config.keep_alive_timeout, config.read_timeout) == (65.0, None)
    assert Settings.from_env({"KEEPALIVE_TIMEOUT_S": "65"}).keepalive_timeout_s == 65.0
    assert Settings().keepalive_timeout_s == 5.0
