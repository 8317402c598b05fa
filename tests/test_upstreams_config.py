"""UPSTREAMS_FILE as data: every upstream a file declares, and every refusal word for word."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

from trio_batcher.settings import SPECS, Settings
from trio_batcher.upstream.kinds import MissingExtraError
from trio_batcher.upstreams.config import (
    AnthropicAccess,
    BedrockAccess,
    UpstreamsFileError,
    UpstreamSpec,
    VertexAccess,
    from_settings,
    parse_upstreams,
    read_upstreams_file,
    upstreams_in_force,
)

GOOD = """
[[upstream]]
name = "anthropic-main"
kind = "anthropic"
api_key_env = "MAIN_KEY"
max_concurrency = 64
weight = 3
models = { "claude-sonnet-4-5" = "claude-sonnet-4-5-20250929" }

[[upstream]]
name = "bedrock-east"
kind = "bedrock"
region = "us-east-1"
profile = "prod"
base_url = "http://127.0.0.1:9000/"
models = { "claude-sonnet-4-5" = "us.anthropic.claude-sonnet-4-5-20250929-v1:0" }

[[upstream]]
name = "vertex-eu"
kind = "vertex"
project = "my-project"
region = "europe-west1"
priority = 1
models = { "claude-sonnet-4-5" = "claude-sonnet-4-5@20250929" }
"""


def _no_extra_needed(kind: str) -> None:
    pass


def test_a_good_file_becomes_frozen_specs_in_file_order() -> None:
    main, bedrock, vertex = parse_upstreams(GOOD, require=_no_extra_needed)
    assert main == UpstreamSpec(
        name="anthropic-main",
        access=AnthropicAccess(api_key_env="MAIN_KEY", base_url="https://api.anthropic.com"),
        max_concurrency=64,
        weight=3,
        priority=0,
        models={"claude-sonnet-4-5": "claude-sonnet-4-5-20250929"},
    )
    assert bedrock.access == BedrockAccess("us-east-1", "prod", "http://127.0.0.1:9000")
    assert (bedrock.weight, bedrock.priority, bedrock.max_concurrency) == (1, 0, None)
    assert vertex.access == VertexAccess("my-project", "europe-west1", None)
    assert vertex.priority == 1
    assert [s.kind for s in (main, bedrock, vertex)] == ["anthropic", "bedrock", "vertex"]
    with pytest.raises(AttributeError):
        main.weight = 2  # type: ignore[misc]
    with pytest.raises(TypeError):
        main.models["x"] = "y"  # type: ignore[index]


def test_anthropic_passes_unmapped_models_through_and_clouds_serve_only_what_they_map() -> None:
    main, bedrock, vertex = parse_upstreams(GOOD, require=_no_extra_needed)
    assert main.model_id("claude-sonnet-4-5") == "claude-sonnet-4-5-20250929"
    assert main.model_id("claude-haiku-4-5") == "claude-haiku-4-5"
    assert bedrock.model_id("claude-sonnet-4-5") == "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
    assert bedrock.model_id("claude-haiku-4-5") is None
    assert vertex.model_id("claude-sonnet-4-5") == "claude-sonnet-4-5@20250929"
    assert vertex.model_id("claude-haiku-4-5") is None


def test_without_the_file_settings_describe_one_anthropic_upstream_named_default() -> None:
    settings = Settings(anthropic_base_url="http://127.0.0.1:8001", anthropic_api_key="k")
    assert from_settings(settings) == (
        UpstreamSpec(
            name="default",
            access=AnthropicAccess(
                api_key_env="ANTHROPIC_API_KEY", base_url="http://127.0.0.1:8001"
            ),
        ),
    )
    assert upstreams_in_force(settings) == from_settings(settings)
    (default,) = from_settings(Settings())
    assert default.access == AnthropicAccess("ANTHROPIC_API_KEY", "https://api.anthropic.com")
    assert (default.max_concurrency, default.weight, default.priority) == (None, 1, 0)
    assert default.model_id("claude-anything") == "claude-anything"


def test_the_setting_names_the_file_and_upstreams_in_force_reads_it(
    tmp_path: pathlib.Path,
) -> None:
    assert "UPSTREAMS_FILE" in {spec.env for spec in SPECS}
    path = tmp_path / "upstreams.toml"
    path.write_text('[[upstream]]\nname = "only"\nkind = "anthropic"\n')
    settings = Settings.from_env({"UPSTREAMS_FILE": str(path)})
    assert settings.upstreams_file == str(path)
    (only,) = upstreams_in_force(settings)
    assert only.name == "only"
    assert only.access == AnthropicAccess()


def test_an_unreadable_or_undecodable_file_is_named(tmp_path: pathlib.Path) -> None:
    missing = tmp_path / "nope.toml"
    with pytest.raises(UpstreamsFileError) as caught:
        read_upstreams_file(missing)
    assert str(caught.value) == f"{missing}: cannot read: No such file or directory"
    latin = tmp_path / "latin.toml"
    latin.write_bytes(b"# caf\xe9\n")
    with pytest.raises(UpstreamsFileError) as caught:
        read_upstreams_file(latin)
    assert str(caught.value) == f"{latin}: not UTF-8 (byte 5)"


def _missing(kind: str) -> None:
    if kind == "vertex":
        raise MissingExtraError("vertex", "vertex", "google.auth", "google-auth[requests]")


def test_a_kind_whose_extra_is_missing_names_the_pip_command() -> None:
    with pytest.raises(UpstreamsFileError) as caught:
        parse_upstreams(GOOD, require=_missing)
    assert caught.value.problems == (
        "upstream 'vertex-eu': kind: upstream kind 'vertex' needs google-auth[requests], "
        "which is not installed (cannot import google.auth); install it with: "
        "pip install 'trio-batcher[vertex]'",
    )


def test_require_is_asked_once_per_kind_named() -> None:
    asked: list[str] = []
    parse_upstreams(GOOD + GOOD.replace('name = "', 'name = "b-'), require=asked.append)
    assert asked == ["anthropic", "bedrock", "vertex"]


A = '[[upstream]]\nname = "a"\nkind = "anthropic"\n'
B = '[[upstream]]\nname = "b"\nkind = "bedrock"\nregion = "us-east-1"\nmodels = { m = "id" }\n'
V = '[[upstream]]\nname = "v"\nkind = "vertex"\nproject = "p"\nregion = "us-east5"\nmodels = { m = "id" }\n'
KEY = "sk-ant-api03-" + "x" * 40

# (the file, every problem it has, in order)
BAD: list[tuple[str, list[str]]] = [
    (
        "[[upstream]\n",
        ["not valid TOML: Expected ']]' at the end of an array declaration (at line 1, column 11)"],
    ),
    (
        "",
        [
            "declares no upstream: add an [[upstream]] table, or unset UPSTREAMS_FILE to use ANTHROPIC_BASE_URL and ANTHROPIC_API_KEY"
        ],
    ),
    ("upstream = 3\n", ["'upstream' must be an array of tables: write each one as [[upstream]]"]),
    (
        A + "[tenant]\nname = 'x'\n",
        ["unknown top-level key 'tenant' (upstreams are [[upstream]] tables)"],
    ),
    (
        '[[upstream]]\nkind = "anthropic"\n',
        ['upstream #1: name: is required (a unique label for metrics and logs: name = "main")'],
    ),
    (
        '[[upstream]]\nname = "a b"\nkind = "anthropic"\n',
        [
            "upstream #1: name: must be 1-64 of A-Z a-z 0-9 . _ - (starting with a letter or digit), got 'a b'"
        ],
    ),
    (
        A + A,
        [
            "upstream 'a' is declared twice (upstreams #1 and #2); names must be unique: they label metrics and logs"
        ],
    ),
    (
        '[[upstream]]\nname = "a"\n',
        ['upstream \'a\': kind: is required, one of "anthropic", "bedrock", "vertex"'],
    ),
    (
        '[[upstream]]\nname = "a"\nkind = "openai"\n',
        ['upstream \'a\': kind: expected one of "anthropic", "bedrock", "vertex", got \'openai\''],
    ),
    (
        A + "weigth = 2\n",
        [
            "upstream 'a': weigth: unknown field (did you mean 'weight'?); known fields: name, kind, max_concurrency, weight, priority, base_url, models, api_key_env"
        ],
    ),
    (
        A + "region = 'us-east-1'\n",
        [
            "upstream 'a': region: is a field of kind bedrock and vertex, not anthropic; fields of kind anthropic: name, kind, max_concurrency, weight, priority, base_url, models, api_key_env"
        ],
    ),
    (
        B + "project = 'p'\n",
        [
            "upstream 'b': project: is a field of kind vertex, not bedrock; fields of kind bedrock: name, kind, max_concurrency, weight, priority, base_url, models, region, profile"
        ],
    ),
    (
        A + f"api_key = '{KEY}'\n",
        [
            "upstream 'a': api_key: looks like an Anthropic API key (value not shown). Keys never live in this file: put it in an environment variable and name that variable: api_key_env = \"MY_KEY_VAR\""
        ],
    ),
    (
        A + "api_key = 'not-a-key-prefix'\n",
        [
            "upstream 'a': api_key: secrets never live in this file (value not shown): an anthropic upstream names the environment variable holding its key (api_key_env); bedrock and vertex use their standard credential chains"
        ],
    ),
    (
        B + "aws_secret_access_key = 'abc'\n",
        [
            "upstream 'b': aws_secret_access_key: secrets never live in this file (value not shown): an anthropic upstream names the environment variable holding its key (api_key_env); bedrock and vertex use their standard credential chains"
        ],
    ),
    (
        A + f"api_key_env = '{KEY}'\n",
        [
            "upstream 'a': api_key_env: looks like an Anthropic API key (value not shown). Keys never live in this file: put it in an environment variable and name that variable: api_key_env = \"MY_KEY_VAR\""
        ],
    ),
    (
        A + "api_key_env = 'my key'\n",
        [
            "upstream 'a': api_key_env: expected the name of the environment variable holding the key, such as \"ANTHROPIC_API_KEY\" (value not shown)"
        ],
    ),
    (A + "max_concurrency = 0\n", ["upstream 'a': max_concurrency: must be >= 1, got 0"]),
    (
        A + "max_concurrency = 2.5\n",
        ["upstream 'a': max_concurrency: expected a whole number, got 2.5"],
    ),
    (A + "weight = 0\n", ["upstream 'a': weight: must be >= 1, got 0"]),
    (A + "weight = true\n", ["upstream 'a': weight: expected a whole number, got True"]),
    (A + "priority = '1'\n", ["upstream 'a': priority: expected a whole number, got '1'"]),
    (
        A + "base_url = 'api.anthropic.com'\n",
        [
            "upstream 'a': base_url: expected an http:// or https:// URL with a host and no query, fragment or credentials (value not shown), such as https://api.anthropic.com"
        ],
    ),
    (
        A + "base_url = 'https://user:pw@host/'\n",
        [
            "upstream 'a': base_url: expected an http:// or https:// URL with a host and no query, fragment or credentials (value not shown), such as https://api.anthropic.com"
        ],
    ),
    (
        A + "models = ['claude']\n",
        [
            'upstream \'a\': models: must be a table of client model name -> model id: models = { "claude-sonnet-4-5" = "<this upstream\'s model id>" }'
        ],
    ),
    (A + "models = { claude = 3 }\n", ["upstream 'a': models.claude: expected a model id, got 3"]),
    (
        A + "models = { 'a b' = 'x' }\n",
        ["upstream 'a': models: expected a model name as each key, got 'a b'"],
    ),
    (
        '[[upstream]]\nname = "b"\nkind = "bedrock"\nregion = "us-east-1"\n',
        [
            'upstream \'b\': models: is required for kind bedrock: it serves only the models it maps, from the name clients send to its own id: models = { "claude-sonnet-4-5" = "<this upstream\'s model id>" }'
        ],
    ),
    (
        '[[upstream]]\nname = "b"\nkind = "bedrock"\nregion = "us-east-1"\nmodels = {}\n',
        [
            'upstream \'b\': models: an empty table serves nothing; map at least one: models = { "claude-sonnet-4-5" = "<this upstream\'s model id>" }'
        ],
    ),
    (
        '[[upstream]]\nname = "b"\nkind = "bedrock"\nmodels = { m = "id" }\n',
        ["upstream 'b': region: is required: an AWS region such as \"us-east-1\""],
    ),
    (B + "profile = 'a/b'\n", ["upstream 'b': profile: expected an AWS profile name, got 'a/b'"]),
    (
        '[[upstream]]\nname = "v"\nkind = "vertex"\nmodels = { m = "id" }\n',
        [
            "upstream 'v': region: is required: a Google Cloud location such as \"us-east5\"",
            "upstream 'v': project: is required: a Google Cloud project id such as \"my-project\"",
        ],
    ),
    (
        V.replace('"us-east5"', '"us east5"'),
        [
            "upstream 'v': region: expected a Google Cloud location such as \"us-east5\", got 'us east5'"
        ],
    ),
    # Every problem of every table at once.
    (
        A + "weight = 0\npriority = 1.5\n" + '[[upstream]]\nname = "c"\nkind = "x"\n',
        [
            "upstream 'a': weight: must be >= 1, got 0",
            "upstream 'a': priority: expected a whole number, got 1.5",
            'upstream \'c\': kind: expected one of "anthropic", "bedrock", "vertex", got \'x\'',
        ],
    ),
]


@pytest.mark.parametrize(("text", "problems"), BAD, ids=[str(i) for i in range(len(BAD))])
def test_every_refusal_names_the_upstream_the_field_and_what_to_do(
    text: str, problems: list[str]
) -> None:
    with pytest.raises(UpstreamsFileError) as caught:
        parse_upstreams(text, source="u.toml", require=_no_extra_needed)
    assert list(caught.value.problems) == problems
    assert str(caught.value) == "u.toml: " + "; ".join(problems)


def test_a_key_is_never_echoed_whatever_field_it_is_pasted_into() -> None:
    for field in ("api_key", "api_key_env", "region", "base_url", "name", "token"):
        text = f'[[upstream]]\nname = "a"\nkind = "anthropic"\n{field} = "{KEY}"\n'
        with pytest.raises(UpstreamsFileError) as caught:
            parse_upstreams(text, require=_no_extra_needed)
        assert KEY not in str(caught.value)
        assert "sk-ant" not in str(caught.value)


def test_a_long_list_of_problems_is_counted_past_eight() -> None:
    text = "".join(
        f'[[upstream]]\nname = "u{i}"\nkind = "anthropic"\nweight = 0\n' for i in range(10)
    )
    with pytest.raises(UpstreamsFileError) as caught:
        parse_upstreams(text, source="u.toml", require=_no_extra_needed)
    assert len(caught.value.problems) == 10
    assert str(caught.value).endswith("upstream 'u7': weight: must be >= 1, got 0; and 2 more")


def test_serving_checks_the_file_and_the_key_variables_it_names(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``check_files`` (what ``serve`` and each ASGI worker call before serving) names the
    file's problems, and an anthropic upstream whose key variable is unset -- by the
    variable's name, never a value -- so a gateway never starts unable to call an upstream."""
    from trio_batcher.runtime import check_files
    from trio_batcher.settings import SettingsError

    good = tmp_path / "upstreams.toml"
    good.write_text('[[upstream]]\nname = "a"\nkind = "anthropic"\napi_key_env = "KEY_OF_A"\n')
    monkeypatch.delenv("KEY_OF_A", raising=False)
    with pytest.raises(SettingsError) as refused:
        check_files(Settings(upstreams_file=str(good)))
    assert refused.value.name == "UPSTREAMS_FILE"
    assert "KEY_OF_A is not set" in refused.value.problem
    monkeypatch.setenv("KEY_OF_A", "sk-ant-secret-value")
    check_files(Settings(upstreams_file=str(good)))
    bad = tmp_path / "bad.toml"
    bad.write_text('[[upstream]]\nname = "a"\nkind = "anthropik"\n')
    with pytest.raises(SettingsError) as named:
        check_files(Settings(upstreams_file=str(bad)))
    assert "expected one of" in named.value.problem


def test_a_gateway_of_clouds_only_names_its_deployment_by_what_it_fronts(
    tmp_path: pathlib.Path,
) -> None:
    """Two gateways on one host in front of different Bedrock regions keep their state
    apart (``store.deployment``); the same file names the same deployment; DEPLOYMENT_ID
    wins; with an anthropic upstream, its URL and key name it as they always have."""
    from trio_batcher.store.deployment import deployment_of
    from trio_batcher.upstreams.build import primary_settings

    def settings_for(text: str, **changes: Any) -> Settings:
        path = tmp_path / f"u{abs(hash(text))}.toml"
        path.write_text(text)
        base = Settings(upstreams_file=str(path), **changes)
        specs = parse_upstreams(text, require=lambda kind: None)
        return primary_settings(base, specs)

    east = (
        '[[upstream]]\nname = "b"\nkind = "bedrock"\nregion = "us-east-1"\nmodels = { "m" = "x" }\n'
    )
    west = east.replace("us-east-1", "us-west-2")
    ids = [deployment_of(settings_for(text)).id for text in (east, west, east)]
    assert ids[0] != ids[1] and ids[0] == ids[2] and ids[0].startswith("clouds-")
    assert deployment_of(settings_for(east, deployment_id="mine")).id == "mine"
    anthropic = '[[upstream]]\nname = "a"\nkind = "anthropic"\nbase_url = "http://127.0.0.1:9"\n'
    assert settings_for(anthropic + east).anthropic_base_url == "http://127.0.0.1:9"
