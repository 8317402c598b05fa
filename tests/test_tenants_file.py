"""The tenants file as data: what it declares, what it refuses and how, and the directory
built from it (lookup by key, PROXY_API_KEYS tenants, anonymous), with keys never kept."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from trio_batcher.runtime import check_files
from trio_batcher.settings import Settings, SettingsError
from trio_batcher.tenants import (
    ANONYMOUS,
    Budget,
    BudgetPeriod,
    Tenant,
    TenantsFileError,
    build_directory,
    hash_key,
    load_tenants,
    parse_tenants,
    proxy_key_digests,
)

KEY_A = "tb-alpha-key-for-tests"
KEY_B = "tb-bravo-key-for-tests"


def digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


FULL = f"""
# a comment
[[tenant]]
name = "team-a"
key_sha256 = ["{digest(KEY_A)}"]
weight = 3
max_inflight = 8
max_queue = 0
rpm = 600
tpm = 400000
budget_usd = 500
budget_period = "monthly"
models = ["claude-sonnet-*", "claude-haiku-4-5"]

[[tenant]]
name = "batch.jobs_2"
key_sha256 = ["{digest(KEY_B).upper()}"]
weight = 0.5
budget_usd = 12.5
budget_period = "7d"
"""


def problems_of(text: str) -> tuple[str, ...]:
    with pytest.raises(TenantsFileError) as caught:
        parse_tenants(text, source="t.toml")
    assert str(caught.value).startswith("t.toml: ")
    return caught.value.problems


def test_every_field_is_read_into_the_tenant() -> None:
    a, b = parse_tenants(FULL)
    assert a == Tenant(
        name="team-a",
        key_hashes=frozenset({digest(KEY_A)}),
        weight=3.0,
        max_inflight=8,
        max_queue=0,
        rpm=600,
        tpm=400000,
        budget=Budget(500.0, BudgetPeriod()),
        models=("claude-sonnet-*", "claude-haiku-4-5"),
    )
    assert b.name == "batch.jobs_2"
    assert b.key_hashes == {digest(KEY_B)}  # upper-case hex is normalised
    assert b.weight == 0.5
    assert b.budget == Budget(12.5, BudgetPeriod(days=7))
    assert (b.max_inflight, b.max_queue, b.rpm, b.tpm, b.models) == (None,) * 5


def test_only_the_name_is_required_and_the_defaults_are_no_limits() -> None:
    (t,) = parse_tenants('[[tenant]]\nname = "solo"\n')
    assert t == Tenant(name="solo")
    assert t.weight == 1.0 and t.key_hashes == frozenset() and t.budget is None
    assert t.allows_model("anything") and not t.rate_limited
    assert parse_tenants("# nothing yet\n") == ()


def test_a_budget_without_a_period_is_monthly() -> None:
    (t,) = parse_tenants('[[tenant]]\nname = "a"\nbudget_usd = 0\n')
    assert t.budget == Budget(0.0, BudgetPeriod(days=None))


def test_models_are_exact_names_or_case_sensitive_patterns() -> None:
    (t,) = parse_tenants(FULL)[:1]
    assert t.allows_model("claude-sonnet-4-5")
    assert t.allows_model("claude-haiku-4-5")
    assert not t.allows_model("claude-haiku-4-5-20251001")
    assert not t.allows_model("Claude-Sonnet-4-5")
    assert not t.allows_model("claude-opus-4-1")


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("rpn = 5", "tenant 'a': rpn: unknown field (did you mean 'rpm'?)"),
        ("weight = 0", "tenant 'a': weight: must be > 0, got 0"),
        ("weight = -1.5", "tenant 'a': weight: must be > 0, got -1.5"),
        ("weight = true", "tenant 'a': weight: expected a finite number, got True"),
        ("budget_usd = inf", "tenant 'a': budget_usd: expected a finite number, got inf"),
        ("budget_usd = -1", "tenant 'a': budget_usd: must be >= 0, got -1"),
        ("rpm = 1.5", "tenant 'a': rpm: expected a whole number, got 1.5"),
        ("tpm = 0", "tenant 'a': tpm: must be >= 1, got 0"),
        ("max_inflight = 0", "tenant 'a': max_inflight: must be >= 1, got 0"),
        ("max_queue = -1", "tenant 'a': max_queue: must be >= 0, got -1"),
        ('budget_period = "monthly"', "tenant 'a': budget_period: needs budget_usd"),
        ('budget_usd = 1\nbudget_period = "weekly"', "tenant 'a': budget_period: expected"),
        ('budget_usd = 1\nbudget_period = "0d"', "tenant 'a': budget_period: expected"),
        ("models = []", "tenant 'a': models: an empty list allows nothing"),
        ('models = ["claude x"]', "tenant 'a': models[0]: expected a model name"),
        ('key_sha256 = "abc"', "tenant 'a': key_sha256: must be a list"),
    ],
)
def test_a_bad_field_is_refused_naming_the_tenant_and_the_field(body: str, expected: str) -> None:
    (problem,) = problems_of(f'[[tenant]]\nname = "a"\n{body}\n')
    assert problem.startswith(expected)


def test_a_bad_or_missing_name_is_refused_by_position() -> None:
    problems = problems_of(
        '[[tenant]]\nname = "ok"\n[[tenant]]\nweight = 2\n[[tenant]]\nname = 7\n'
        '[[tenant]]\nname = "has space"\n[[tenant]]\nname = "key-1234abcd"\n'
    )
    assert problems[0] == "tenant #2: name is required"
    assert problems[1].startswith("tenant #3: name must be 1-64 of")
    assert problems[2].startswith("tenant 'has space': name must be 1-64 of")
    assert problems[3].startswith("tenant 'key-1234abcd': name may not begin 'key-'")


def test_unknown_top_level_keys_and_a_table_instead_of_an_array_are_refused() -> None:
    assert problems_of('version = 2\n[[tenant]]\nname = "a"\n') == (
        "unknown top-level key 'version' (tenants are [[tenant]] tables)",
    )
    (problem,) = problems_of('[tenant]\nname = "a"\n')
    assert "write each one as [[tenant]]" in problem


def test_duplicate_names_and_duplicate_digests_are_refused() -> None:
    d = digest(KEY_A)
    problems = problems_of(
        f'[[tenant]]\nname = "a"\nkey_sha256 = ["{d}"]\n'
        f'[[tenant]]\nname = "a"\n'
        f'[[tenant]]\nname = "b"\nkey_sha256 = ["{d.upper()}"]\n'
        f'[[tenant]]\nname = "c"\nkey_sha256 = ["{d}", "{d}"]\n'
    )
    assert problems == (
        "tenant 'a' is declared twice (tenants #1 and #2)",
        f"tenant 'b': key_sha256 {d[:8]}... is already tenant 'a''s (a key belongs to one tenant)",
        f"tenant 'c': key_sha256[1]: {d[:8]}... is listed twice",
    )


def test_a_key_pasted_where_its_digest_belongs_is_refused_without_echoing_it() -> None:
    (problem,) = problems_of(f'[[tenant]]\nname = "a"\nkey_sha256 = ["{KEY_A}"]\n')
    assert problem.startswith("tenant 'a': key_sha256[0]: not a SHA-256 hex digest")
    assert KEY_A not in problem


def test_a_syntax_error_names_the_line() -> None:
    (problem,) = problems_of('[[tenant]]\nname = "a"\nweight = \n')
    assert problem.startswith("not valid TOML:") and "line 3" in problem


def test_every_problem_is_reported_at_once() -> None:
    problems = problems_of(
        '[[tenant]]\nname = "a"\nrpm = 0\ntpm = 0\n[[tenant]]\nname = "b"\nx = 1\n'
    )
    assert [p.split(":")[0:2] for p in problems] == [
        ["tenant 'a'", " rpm"],
        ["tenant 'a'", " tpm"],
        ["tenant 'b'", " x"],
    ]


def test_the_anonymous_tenant_may_not_have_keys() -> None:
    (problem,) = problems_of(f'[[tenant]]\nname = "anonymous"\nkey_sha256 = ["{digest(KEY_A)}"]\n')
    assert problem.startswith("tenant 'anonymous': key_sha256: the anonymous tenant")


# -- the directory ---------------------------------------------------------------------


def test_a_presented_key_finds_its_tenant_and_an_unknown_or_absent_one_none() -> None:
    directory = build_directory(parse_tenants(FULL))
    assert directory.auth_required
    team_a = directory.lookup(KEY_A)
    assert team_a is not None and team_a.name == "team-a"
    batch = directory.lookup(KEY_B)
    assert batch is not None and batch.name == "batch.jobs_2"
    assert directory.lookup("tb-someone-else") is None
    assert directory.lookup(None) is None
    assert directory.lookup("") is None
    assert directory.lookup_digest(hash_key(KEY_A)) is team_a
    assert directory.names() == ("team-a", "batch.jobs_2")


def test_each_proxy_api_key_is_a_tenant_named_by_its_digest() -> None:
    directory = build_directory((), proxy_key_digests(["pk-1", "pk-2", "pk-1"]))
    names = directory.names()
    assert names == (f"key-{digest('pk-1')[:8]}", f"key-{digest('pk-2')[:8]}")
    tenant = directory.lookup("pk-2")
    assert tenant is not None and tenant.name == names[1] and tenant.origin == "proxy_api_keys"
    assert tenant.weight == 1.0 and not tenant.rate_limited and tenant.budget is None
    assert ANONYMOUS not in directory and directory.lookup("pk-3") is None


def test_proxy_key_names_grow_when_two_digests_share_a_prefix() -> None:
    a = "abcdef01" + "0" * 56
    b = "abcdef01" + "1" * 56
    directory = build_directory((), [a, b])
    assert directory.names() == ("key-abcdef010000", "key-abcdef011111")


def test_a_proxy_key_the_file_lists_belongs_to_the_files_tenant() -> None:
    directory = build_directory(parse_tenants(FULL), proxy_key_digests([KEY_A, "pk-extra"]))
    tenant = directory.lookup(KEY_A)
    assert tenant is not None and tenant.name == "team-a"
    assert directory.names() == ("team-a", "batch.jobs_2", f"key-{digest('pk-extra')[:8]}")


def test_without_any_key_every_caller_is_anonymous() -> None:
    directory = build_directory(parse_tenants('[[tenant]]\nname = "keyless"\n'))
    assert not directory.auth_required
    for presented in (None, "", "whatever"):
        tenant = directory.lookup(presented)
        assert tenant is not None and tenant.name == ANONYMOUS and tenant.origin == "anonymous"
    assert directory.names() == ("keyless", ANONYMOUS)


def test_the_file_can_set_the_anonymous_tenants_limits() -> None:
    tenants = parse_tenants('[[tenant]]\nname = "anonymous"\nrpm = 10\n')
    tenant = build_directory(tenants).lookup(None)
    assert tenant is not None and tenant.rpm == 10
    # ... which has no effect once keys exist: then nobody is anonymous.
    with_keys = build_directory(tenants, proxy_key_digests(["pk"]))
    assert ANONYMOUS not in with_keys and with_keys.lookup(None) is None


def test_no_key_appears_in_any_repr_or_str() -> None:
    directory = load_tenants(None, proxy_api_keys=["pk-secret-one"])
    text = repr(directory) + str(directory) + "".join(repr(t) + str(t) for t in directory)
    assert "pk-secret-one" not in text
    assert digest("pk-secret-one") not in text  # not even the digest: only its name's prefix
    assert repr(next(iter(directory))) == (
        f"Tenant(name='key-{digest('pk-secret-one')[:8]}', keys=1, weight=1, "
        "origin='proxy_api_keys')"
    )


def test_load_tenants_reads_the_file_and_names_it_in_errors(tmp_path: Path) -> None:
    path = tmp_path / "tenants.toml"
    path.write_text(FULL)
    directory = load_tenants(path, proxy_api_keys=[])
    assert directory.source == str(path) and len(directory) == 2
    path.write_bytes(b'[[tenant]]\nname = "\xff"\n')
    with pytest.raises(TenantsFileError, match=r"tenants\.toml: not UTF-8"):
        load_tenants(path)
    with pytest.raises(TenantsFileError, match="cannot read"):
        load_tenants(tmp_path / "missing.toml")


def test_a_bad_tenants_file_stops_startup_as_a_settings_error(tmp_path: Path) -> None:
    path = tmp_path / "tenants.toml"
    path.write_text('[[tenant]]\nname = "a"\nrpm = 0\n')
    with pytest.raises(SettingsError) as caught:
        check_files(Settings.from_env({"TENANTS_FILE": str(path)}))
    assert caught.value.name == "TENANTS_FILE"
    assert "tenant 'a': rpm: must be >= 1, got 0" in caught.value.problem
    path.write_text(FULL)
    settings = Settings.from_env({"TENANTS_FILE": str(path)})
    check_files(settings)
    assert settings.tenants_file == str(path)
    with pytest.raises(SettingsError, match="no such file"):
        check_files(Settings.from_env({"TENANTS_FILE": str(tmp_path / "nope.toml")}))


def test_the_documented_example_is_a_valid_tenants_file() -> None:
    from trio_batcher.tenants import keys_file

    doc = keys_file.__doc__ or ""
    example = doc.split("::\n", 1)[1].split("\nOnly ``name`` is required.", 1)[0]
    team_a, batch = parse_tenants(example.replace("\n    ", "\n"))
    assert team_a.name == "team-a" and team_a.budget == Budget(500.0)
    assert team_a.weight == 3.0 and team_a.models == ("claude-sonnet-*", "claude-haiku-4-5")
    assert batch.name == "batch-jobs" and len(batch.key_hashes) == 1
