from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from trio_batcher.observatory.pricing import ModelPrice, PriceTable, TokenUsage, load_pricing

# WIRE.md's price table, one row per family it names:
# family -> (input, cache write 5m, cache write 1h, cache read, output), USD per million tokens.
_OPUS_NEW = ("5", "6.25", "10", "0.50", "25")
_OPUS_OLD = ("15", "18.75", "30", "1.50", "75")
_SONNET_4 = ("3", "3.75", "6", "0.30", "15")
WIRE_PRICES = {
    "claude-opus-4-5": _OPUS_NEW,
    "claude-opus-4-6": _OPUS_NEW,
    "claude-opus-4-7": _OPUS_NEW,
    "claude-opus-4-8": _OPUS_NEW,
    "claude-opus-5": _OPUS_NEW,
    "claude-opus-4": _OPUS_OLD,
    "claude-opus-4-1": _OPUS_OLD,
    "claude-sonnet-4": _SONNET_4,
    "claude-sonnet-4-5": _SONNET_4,
    "claude-sonnet-4-6": _SONNET_4,
    "claude-3-7-sonnet": _SONNET_4,
    "claude-sonnet-5": ("2", "2.50", "4", "0.20", "10"),
    "claude-haiku-4-5": ("1", "1.25", "2", "0.10", "5"),
    "claude-3-5-haiku": ("0.80", "1", "1.6", "0.08", "4"),
    "claude-3-haiku": ("0.25", "0.30", "0.50", "0.03", "1.25"),
}

# The rows the pricing page did not give yet: the pricing tiers of the model catalog bundled
# in Claude Code 2.1.328 (read 2026-12), whose default model is claude-opus-5-5.
CLAUDE_CODE_PRICES = {
    "claude-opus-5-5": ("4", "5", "8", "0.20", "20"),
    "claude-sonnet-5-5": ("2", "2.50", "4", "0.10", "10"),
    "claude-haiku-5-5": ("0.10", "0.125", "0.20", "0.01", "0.50"),
    "claude-fable-5-2": ("8", "10", "16", "0.20", "40"),
    "claude-mythos-5": ("10", "12.50", "20", "1", "50"),
}

MILLION = 1_000_000


@pytest.fixture(scope="module")
def table() -> PriceTable:
    return load_pricing(None)


@pytest.mark.parametrize("family", sorted(WIRE_PRICES | CLAUDE_CODE_PRICES))
def test_bundled_table_has_every_wire_price_row(table: PriceTable, family: str) -> None:
    prices = (WIRE_PRICES | CLAUDE_CODE_PRICES)[family]
    inp, write_5m, write_1h, read, out = (Decimal(v) for v in prices)
    assert table.families[family] == ModelPrice(
        input=inp, output=out, cache_write_5m=write_5m, cache_write_1h=write_1h, cache_read=read
    )


def test_bundled_table_says_where_its_prices_come_from(table: PriceTable) -> None:
    assert table.source
    assert table.as_of


@pytest.mark.parametrize(
    ("model", "family"),
    [
        ("claude-sonnet-4-5-20250929", "claude-sonnet-4-5"),
        ("claude-sonnet-4-20250514", "claude-sonnet-4"),
        ("claude-3-5-haiku-latest", "claude-3-5-haiku"),
        ("claude-3-5-haiku-20241022", "claude-3-5-haiku"),
        ("claude-3-haiku-20240307", "claude-3-haiku"),
        ("claude-3-7-sonnet-latest", "claude-3-7-sonnet"),
        ("claude-opus-4-20250514", "claude-opus-4"),
        ("claude-opus-4-0", "claude-opus-4"),
        ("claude-opus-4-1-20250805", "claude-opus-4-1"),
        ("claude-opus-4-5-20251101", "claude-opus-4-5"),
        ("claude-opus-4-5", "claude-opus-4-5"),
        ("claude-opus-4-1", "claude-opus-4-1"),
        ("claude-opus-4", "claude-opus-4"),
        ("claude-haiku-4-5", "claude-haiku-4-5"),
        ("Claude-Sonnet-4-5", "claude-sonnet-4-5"),
        ("claude-opus-4-5@20251101", "claude-opus-4-5"),
        ("claude-opus-5-5", "claude-opus-5-5"),  # not claude-opus-5: another version
        ("claude-opus-5", "claude-opus-5"),
        ("claude-sonnet-5-5", "claude-sonnet-5-5"),
        ("claude-haiku-5-5", "claude-haiku-5-5"),
    ],
)
def test_model_names_resolve_to_the_longest_matching_family(
    table: PriceTable, model: str, family: str
) -> None:
    assert table.family_for(model) == family


@pytest.mark.parametrize(
    "model",
    [
        "gpt-4o",
        "",
        "claude",
        "claude-opus-45",  # not a segment boundary
        "claude-opus-4-9",  # a minor version the table does not list
        "claude-sonnet-4-7-20270101",
        "anthropic.claude-3-haiku-20240307-v1:0",
    ],
)
def test_models_the_table_does_not_list_are_unpriced(table: PriceTable, model: str) -> None:
    assert table.family_for(model) is None
    assert table.cost(model, TokenUsage(input=1)) is None


@pytest.mark.parametrize("family", sorted(WIRE_PRICES))
def test_a_million_in_and_out_costs_exactly_the_table_sum(table: PriceTable, family: str) -> None:
    inp, _, _, _, out = (Decimal(v) for v in WIRE_PRICES[family])
    cost = table.cost(f"{family}-20990101", TokenUsage(input=MILLION, output=MILLION))
    assert cost == inp + out
    assert float(cost) == float(inp + out)


def test_sonnet_4_5_million_in_and_out_is_exactly_18_dollars(table: PriceTable) -> None:
    cost = table.cost("claude-sonnet-4-5-20250929", TokenUsage(input=MILLION, output=MILLION))
    assert cost is not None
    assert float(cost) == 18.0


def test_cache_reads_and_writes_are_priced_at_their_own_rates(table: PriceTable) -> None:
    usage = TokenUsage.from_anthropic(
        {
            "input_tokens": 0,
            "output_tokens": 0,
            "cache_read_input_tokens": MILLION,
            "cache_creation_input_tokens": MILLION,
        }
    )
    # Without the 5m/1h split, every written token is a 5-minute write: 0.30 + 3.75.
    assert table.cost("claude-sonnet-4-5", usage) == Decimal("4.05")


def test_the_cache_creation_split_prices_each_lifetime_separately(table: PriceTable) -> None:
    usage = TokenUsage.from_anthropic(
        {
            "input_tokens": MILLION,
            "output_tokens": 0,
            "cache_creation_input_tokens": 3 * MILLION,
            "cache_read_input_tokens": 0,
            "cache_creation": {
                "ephemeral_5m_input_tokens": MILLION,
                "ephemeral_1h_input_tokens": 2 * MILLION,
            },
        }
    )
    assert usage == TokenUsage(input=MILLION, cache_write_5m=MILLION, cache_write_1h=2 * MILLION)
    # haiku-4-5: 1 input + 1.25 (5m) + 2 * 2 (1h)
    assert table.cost("claude-haiku-4-5", usage) == Decimal("6.25")


def test_usage_reading_tolerates_missing_and_null_fields() -> None:
    usage = TokenUsage.from_anthropic(
        {
            "input_tokens": 7,
            "output_tokens": None,
            "cache_creation_input_tokens": None,
            "cache_creation": None,
            "service_tier": "standard",
        }
    )
    assert usage == TokenUsage(input=7)


def test_a_split_larger_than_the_reported_total_is_not_undercounted() -> None:
    usage = TokenUsage.from_anthropic(
        {
            "cache_creation_input_tokens": 0,
            "cache_creation": {"ephemeral_5m_input_tokens": 4, "ephemeral_1h_input_tokens": 6},
        }
    )
    assert (usage.cache_write_5m, usage.cache_write_1h, usage.cache_write) == (4, 6, 10)


def test_written_tokens_beyond_the_split_count_as_5_minute_writes() -> None:
    usage = TokenUsage.from_anthropic(
        {
            "cache_creation_input_tokens": 10,
            "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 6},
        }
    )
    assert (usage.cache_write_5m, usage.cache_write_1h) == (4, 6)


def _write(tmp_path: Path, doc: Any) -> str:
    path = tmp_path / "prices.json"
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc), encoding="utf-8")
    return str(path)


_ROW = {"input": 1, "output": 2, "cache_write_5m": 1.25, "cache_write_1h": 2, "cache_read": 0.1}


def test_a_pricing_file_replaces_the_bundled_table(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        {"source": "ours", "as_of": "2027-01", "families": {"My-Model": _ROW}},
    )
    table = load_pricing(path)
    assert table.source == "ours"
    assert table.as_of == "2027-01"
    assert set(table.families) == {"my-model"}
    assert table.family_for("my-model-latest") == "my-model"
    assert table.family_for("claude-sonnet-4-5") is None
    assert table.cost("my-model", TokenUsage(input=MILLION, output=MILLION)) == Decimal(3)


def test_quoted_prices_are_accepted(tmp_path: Path) -> None:
    row = {k: str(v) for k, v in _ROW.items()}
    table = load_pricing(_write(tmp_path, {"families": {"m": row}}))
    assert table.families["m"].cache_write_5m == Decimal("1.25")


@pytest.mark.parametrize(
    ("doc", "problem"),
    [
        ("{not json", "not valid JSON"),
        ([1, 2], "top level must be an object"),
        ({"families": {}}, '"families" must be a non-empty object'),
        ({"families": {"m": [1]}}, "family 'm': prices must be an object"),
        ({"families": {"m": {"input": 1}}}, "family 'm': missing output"),
        ({"families": {"m": {**_ROW, "batch": 1}}}, "family 'm': unknown field(s) batch"),
        ({"families": {"m": {**_ROW, "input": -1}}}, "input must be a non-negative number"),
        ({"families": {"m": {**_ROW, "output": "cheap"}}}, "output must be a non-negative"),
        ({"families": {"m": {**_ROW, "output": True}}}, "output must be a non-negative"),
        ({"families": {"m": _ROW, "M": _ROW}}, "listed twice"),
        ({"families": {" ": _ROW}}, "a family name is empty"),
        ({"unit": "USD per thousand tokens", "families": {"m": _ROW}}, '"unit" must be'),
        ({"source": 3, "families": {"m": _ROW}}, '"source" and "as_of" must be strings'),
    ],
)
def test_a_bad_pricing_file_is_a_value_error_naming_file_and_problem(
    tmp_path: Path, doc: Any, problem: str
) -> None:
    path = _write(tmp_path, doc)
    with pytest.raises(ValueError) as info:
        load_pricing(path)
    assert path in str(info.value)
    assert problem in str(info.value)


def test_a_missing_pricing_file_is_a_value_error(tmp_path: Path) -> None:
    path = str(tmp_path / "nope.json")
    with pytest.raises(ValueError, match="cannot read it") as info:
        load_pricing(path)
    assert path in str(info.value)


_DEAR = {**_ROW, "input": 2, "output": 4}


def test_an_upstream_may_have_its_own_prices_for_some_families(tmp_path: Path) -> None:
    """``upstreams.<name>`` overrides the families it lists for the calls that upstream
    served; the rest of the table, and every other upstream, keep the main prices."""
    doc = {
        "families": {"m": _ROW, "m-big": _ROW},
        "upstreams": {"bedrock-eu": {"M": _DEAR, "m-big-fast": _DEAR}},
    }
    table = load_pricing(_write(tmp_path, doc))
    usage = TokenUsage(input=MILLION, output=MILLION)
    assert table.cost("m-latest", usage) == Decimal(3)
    assert table.cost("m-latest", usage, upstream="bedrock-eu") == Decimal(6)
    assert table.cost("m-latest", usage, upstream="anthropic-main") == Decimal(3)
    assert table.cost("m-big", usage, upstream="bedrock-eu") == Decimal(3)  # not overridden
    # Families resolve over both tables: the upstream's longer key wins there only.
    assert table.family_for("m-big-fast-latest", upstream="bedrock-eu") == "m-big-fast"
    assert table.family_for("m-big-fast-latest") == "m-big"
    assert table.has_own_prices("bedrock-eu") and not table.has_own_prices("anthropic-main")
    assert set(table.upstreams["bedrock-eu"]) == {"m", "m-big-fast"}


def test_the_bundled_table_has_no_upstream_prices(table: PriceTable) -> None:
    assert table.upstreams == {}
    usage = TokenUsage(input=MILLION)
    assert table.cost("claude-sonnet-4-5", usage, upstream="x") == Decimal(3)


@pytest.mark.parametrize(
    ("upstreams", "problem"),
    [
        ([1], '"upstreams" must be an object'),
        ({"eu": {}}, "upstream 'eu': its prices must be a non-empty object"),
        ({"eu": [1]}, "upstream 'eu': its prices must be a non-empty object"),
        ({" ": {"m": _ROW}}, 'an upstream name in "upstreams" is empty'),
        ({"eu": {"m": {"input": 1}}}, "upstream 'eu': family 'm': missing output"),
        ({"eu": {"m": {**_ROW, "x": 1}}}, "upstream 'eu': family 'm': unknown field(s) x"),
        ({"eu": {"m": {**_ROW, "input": -1}}}, "upstream 'eu': family 'm': input must be"),
        ({"eu": {"m": _ROW, "M": _ROW}}, "upstream 'eu': family 'M' is listed twice"),
    ],
)
def test_a_bad_upstream_price_table_is_a_value_error_naming_the_upstream(
    tmp_path: Path, upstreams: Any, problem: str
) -> None:
    path = _write(tmp_path, {"families": {"m": _ROW}, "upstreams": upstreams})
    with pytest.raises(ValueError) as info:
        load_pricing(path)
    assert path in str(info.value)
    assert problem in str(info.value)


def test_prices_for_an_upstream_the_gateway_does_not_have_stop_the_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A misspelt upstream name would quietly never be used: ``check_files`` (run by
    ``serve`` before serving) names it, and the upstreams the gateway does have."""
    from trio_batcher.runtime import check_files
    from trio_batcher.settings import Settings, SettingsError

    pricing = _write(tmp_path, {"families": {"m": _ROW}, "upstreams": {"bedrock-ue": {"m": _DEAR}}})
    upstreams = tmp_path / "upstreams.toml"
    upstreams.write_text(
        '[[upstream]]\nname = "bedrock-eu"\nkind = "anthropic"\napi_key_env = "K"\n'
    )
    monkeypatch.setenv("K", "sk-ant-test")
    with pytest.raises(SettingsError) as refused:
        check_files(Settings(pricing_file=pricing, upstreams_file=str(upstreams)))
    assert refused.value.name == "PRICING_FILE"
    assert "bedrock-ue" in refused.value.problem and "bedrock-eu" in refused.value.problem
    fixed = _write(tmp_path, {"families": {"m": _ROW}, "upstreams": {"bedrock-eu": {"m": _DEAR}}})
    check_files(Settings(pricing_file=fixed, upstreams_file=str(upstreams)))
