"""``trio-batcher keys``: a new key is printed once and only its digest is stored, the rest of
the file is kept byte for byte, the file is replaced atomically, and nothing is ever
written that the gateway would refuse; ``keys list`` never shows a key."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

import pytest

from trio_batcher.cli import main
from trio_batcher.tenants import KeysEditError, add_key, load_tenants, parse_tenants

EXISTING = """\
# Our tenants.  Hand-written comments must survive.

[[tenant]]   # the first
name = "team-a"
# its keys:
key_sha256 = [
    "{a}",   # laptop
    # (one more to come)
]
rpm = 600

[[tenant]]
name = 'team-b'
weight = 2  # twice team-a
models = ["claude-*"]
""".format(a=hashlib.sha256(b"old-key").hexdigest())


def digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "tenants.toml"


def test_a_new_file_gets_a_header_and_the_tenant_with_only_the_digest(path: Path) -> None:
    added = add_key(path, "team-a")
    assert added.key.startswith("tb-") and len(added.key) == 46
    assert added.digest == digest(added.key) and added.created_tenant
    text = path.read_text()
    assert text.startswith("# trio-batcher tenants (TENANTS_FILE)")
    assert added.key not in text and added.digest in text
    assert text.endswith(f'[[tenant]]\nname = "team-a"\nkey_sha256 = ["{added.digest}"]\n')
    tenant = load_tenants(path).lookup(added.key)
    assert tenant is not None and tenant.name == "team-a" and tenant.weight == 1.0
    assert added.key not in repr(added)
    assert not [p for p in path.parent.iterdir() if p != path]  # no temporary file left


def test_every_key_is_new() -> None:
    from trio_batcher.tenants import generate_key

    assert len({generate_key() for _ in range(100)}) == 100


def test_a_key_added_to_a_tenant_keeps_the_rest_of_the_file_byte_for_byte(path: Path) -> None:
    path.write_text(EXISTING)
    added = add_key(path, "team-a")
    assert not added.created_tenant
    text = path.read_text()
    old = digest("old-key")
    assert text == EXISTING.replace(
        f'key_sha256 = [\n    "{old}",   # laptop\n    # (one more to come)\n]\n',
        f'key_sha256 = [\n    "{old}",\n    "{added.digest}",\n]\n',
    )
    (team_a, team_b) = parse_tenants(text)
    assert team_a.key_hashes == {old, added.digest} and team_a.rpm == 600
    assert team_b.weight == 2.0 and team_b.models == ("claude-*",)


def test_weight_is_replaced_in_place_or_added_after_the_name(path: Path) -> None:
    path.write_text(EXISTING)
    b = add_key(path, "team-b", weight=0.5)
    text = path.read_text()
    assert "weight = 0.5\n" in text and "twice team-a" not in text
    assert f"name = 'team-b'\nkey_sha256 = [\"{b.digest}\"]\nweight = 0.5\n" in text
    add_key(path, "team-a", weight=3)
    text = path.read_text()
    assert 'name = "team-a"\nweight = 3\n# its keys:\n' in text
    weights = {t.name: t.weight for t in parse_tenants(text)}
    assert weights == {"team-a": 3.0, "team-b": 0.5}


def test_a_new_tenant_is_appended_after_a_blank_line(path: Path) -> None:
    path.write_text(EXISTING.rstrip("\n"))  # even without a final newline
    added = add_key(path, "team-c", weight=4)
    text = path.read_text()
    assert text.startswith(EXISTING)
    assert text.endswith(
        f'\n\n[[tenant]]\nname = "team-c"\nkey_sha256 = ["{added.digest}"]\nweight = 4\n'
    )


def test_a_file_the_gateway_would_refuse_is_not_touched(path: Path) -> None:
    broken = EXISTING.replace("rpm = 600", "rpm = 0")
    path.write_text(broken)
    with pytest.raises(KeysEditError, match=r"tenant 'team-a': rpm: must be >= 1.*nothing"):
        add_key(path, "team-a")
    assert path.read_text() == broken


def test_names_and_weights_the_file_would_refuse_are_refused_first(path: Path) -> None:
    for name, match in [
        ("bad name", "tenant name must be 1-64"),
        ("key-abcdef12", "may not begin 'key-'"),
        ("anonymous", "callers without a key"),
    ]:
        with pytest.raises(KeysEditError, match=match):
            add_key(path, name)
    for weight in (0.0, -1.0, float("inf")):
        with pytest.raises(KeysEditError, match="finite number > 0"):
            add_key(path, "ok", weight=weight)
    assert not path.exists()


def test_the_files_permissions_are_kept_and_a_symlink_stays_a_symlink(tmp_path: Path) -> None:
    real = tmp_path / "real.toml"
    real.write_text(EXISTING)
    real.chmod(0o640)
    link = tmp_path / "tenants.toml"
    link.symlink_to(real)
    added = add_key(link, "team-b")
    assert link.is_symlink()
    assert added.digest in real.read_text()
    assert stat.S_IMODE(real.stat().st_mode) == 0o640


# -- the command line --------------------------------------------------------------------


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exited:
        main(list(argv))
    out, err = capsys.readouterr()
    code = exited.value.code
    assert isinstance(code, int)
    return code, out, err


def test_keys_add_prints_the_key_alone_on_stdout_once(
    path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "keys", "add", "team-a", "--file", str(path), "--weight", "2")
    assert code == 0
    key = out.strip()
    assert out == key + "\n" and key.startswith("tb-")
    assert key not in err and "shown only this once" in err
    assert f"sha256 {digest(key)[:8]}..." in err
    tenant = load_tenants(path).lookup(key)
    assert tenant is not None and tenant.name == "team-a" and tenant.weight == 2.0


def test_keys_list_shows_names_counts_and_prefixes_never_keys(
    path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TENANTS_FILE", str(path))
    monkeypatch.setenv("PROXY_API_KEYS", "pk-flat-one")
    keys = [run(capsys, "keys", "add", "team-a")[1].strip() for _ in range(2)]
    keys.append(run(capsys, "keys", "add", "team-b", "--weight", "3")[1].strip())
    code, out, err = run(capsys, "keys", "list")
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].split() == ["TENANT", "KEYS", "WEIGHT", "FROM", "KEY", "SHA-256", "PREFIXES"]
    a_prefixes = sorted(digest(k)[:8] for k in keys[:2])
    assert lines[1].split() == ["team-a", "2", "1", "file", *a_prefixes]
    assert lines[2].split() == ["team-b", "1", "3", "file", digest(keys[2])[:8]]
    flat = digest("pk-flat-one")[:8]
    assert lines[3].split() == [f"key-{flat}", "1", "1", "PROXY_API_KEYS", flat]
    for secret in [*keys, "pk-flat-one"]:
        assert secret not in out and digest(secret) not in out


def test_keys_list_without_any_key_says_authentication_is_off(
    path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PROXY_API_KEYS", raising=False)
    path.write_text('[[tenant]]\nname = "nobody"\n')
    code, out, err = run(capsys, "keys", "list", "--file", str(path))
    assert code == 0
    assert [line.split()[0] for line in out.splitlines()] == ["TENANT", "nobody", "anonymous"]
    assert "authentication is off" in err


def test_keys_errors_are_one_line_and_exit_2(
    path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TENANTS_FILE", raising=False)
    code, out, err = run(capsys, "keys", "add", "team-a")
    assert (code, out) == (2, "")
    assert err == "trio-batcher: error: name the tenants file with --file PATH or TENANTS_FILE\n"
    code, out, err = run(capsys, "keys", "list", "--file", str(path))
    assert code == 2 and "no such file" in err
    path.write_text("[[tenant]]\nname = 1\n")
    code, out, err = run(capsys, "keys", "add", "x", "--file", os.fspath(path))
    assert (code, out) == (2, "")
    assert err.startswith("trio-batcher: error: ") and "tenant #1: name must be" in err
    assert len(err.splitlines()) == 1
