"""``doctor``'s key ring check proves the ring opens the stored tokens (key ids alone prove
nothing), names what it cannot open, says which old keys rows without a cluster id still
hold, and never prints key material."""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from click.testing import CliRunner

from craft_operator.cli import main
from craft_operator.cli.doctor import format_result
from craft_operator.config import Settings, load_settings
from craft_operator.credentials import SandboxIdentity, build_credential_store, generate_key_entry
from craft_operator.credentials.db import alembic_config, create_credentials_engine
from craft_operator.credentials.tables import SandboxCredential
from craft_operator.devtools.onyx_schema import add_user
from craft_operator.doctor import Status, check_key_ring
from craft_operator.doctor.key_ring import SAMPLE_PER_KEY
from tests.support.postgres import onyx_database

USER = "3f2b8c1e-9d4a-4e6b-8f0a-1c2d3e4f5a6b"
K1 = generate_key_entry("k1").get_secret_value()
K2 = generate_key_entry("k2").get_secret_value()
#: A key as ``secrets.token_urlsafe(32)`` writes it: also a well-formed key id.
CANARY = base64.urlsafe_b64encode(b"doctor-canary-key-material-32by!").decode().rstrip("=")
SYMBOLS = {Status.OK: "ok", Status.WARN: "warn", Status.FAIL: "FAIL", "dash": "--"}


def settings(tmp_path: Path, keys: str) -> Settings:
    return load_settings(state_dir=tmp_path, encryption_keys=keys)


def mint(tmp_path: Path, keys: str, *names: str) -> None:
    """A PAT for each sandbox ``team-a/<name>``, sealed with ``keys``."""
    store = build_credential_store(settings(tmp_path, keys))
    try:
        for name in names:
            sandbox = SandboxIdentity("team-a", name, f"uid-{name}")
            store.ensure(sandbox, user_id=USER, tenant_id="public")
    finally:
        store.close()


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[sa.Engine]:
    engine = sa.create_engine(f"sqlite:///{tmp_path}/craft-operator.db")
    yield engine
    engine.dispose()


def change_rows(engine: sa.Engine, names: list[str], **values: object) -> None:
    with engine.begin() as connection:
        connection.execute(
            sa.update(SandboxCredential).where(SandboxCredential.name.in_(names)).values(**values)
        )


def test_tokens_under_a_key_id_the_ring_has_but_another_key_fail_naming_sandbox_and_key(
    tmp_path: Path, engine: sa.Engine
) -> None:
    mint(tmp_path, K1, "alice", "bob")
    namesake = generate_key_entry("k1").get_secret_value()  # regenerated under the same id

    result = check_key_ring(settings(tmp_path, namesake), engine)

    assert result.status is Status.FAIL
    assert result.detail == (
        "2 of 2 sampled stored token(s) do not open under the ring's key of their id: "
        "team-a/alice (key 'k1'), team-a/bob (key 'k1')"
    )
    assert "put the originals back" in result.fix


def test_tokens_that_open_with_the_ring_pass(tmp_path: Path, engine: sa.Engine) -> None:
    mint(tmp_path, K1, "alice", "bob")

    result = check_key_ring(settings(tmp_path, K1), engine)

    assert result.status is Status.OK, result
    assert result.detail == "1 key(s), encrypting with 'k1' (from CRAFT_ENCRYPTION_KEYS)"


def test_only_a_bounded_sample_of_each_key_is_opened(tmp_path: Path, engine: sa.Engine) -> None:
    names = [f"box-{n}" for n in range(SAMPLE_PER_KEY + 3)]
    mint(tmp_path, K1, *names)
    namesake = generate_key_entry("k1").get_secret_value()

    result = check_key_ring(settings(tmp_path, namesake), engine)

    assert result.detail.startswith(f"{SAMPLE_PER_KEY} of {SAMPLE_PER_KEY} sampled")


def test_tokens_under_a_key_id_the_ring_lacks_fail(tmp_path: Path, engine: sa.Engine) -> None:
    mint(tmp_path, K1, "alice")

    result = check_key_ring(settings(tmp_path, K2), engine)

    assert result.status is Status.FAIL
    assert "1 stored token(s) are encrypted under key(s) k1, which the key ring lacks" in (
        result.detail
    )


def test_rows_without_a_cluster_id_under_an_old_key_are_a_warning_saying_to_adopt_them(
    tmp_path: Path, engine: sa.Engine
) -> None:
    mint(tmp_path, K1, "alice", "bob")
    change_rows(engine, ["bob"], cluster_id=None)
    rotating = build_credential_store(settings(tmp_path, f"{K2},{K1}"))
    rotating.rotate()
    rotating.close()

    result = check_key_ring(settings(tmp_path, f"{K2},{K1}"), engine)

    assert result.status is Status.WARN
    assert result.detail.endswith(
        "; rows without a cluster id (never rotated) by key: k1: 1"
        "; older key(s) k1 cannot be dropped while such rows use them"
    )
    assert "craft-operator credentials adopt" in result.fix


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_on_a_database_still_at_its_first_revision_the_tokens_are_not_checked_not_failed(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    """doctor from the new image before a rollout, on a database of a release from before
    cluster ids (0001): the ring is not failed for tokens it cannot count yet."""
    url = f"sqlite:///{tmp_path}/craft-operator.db"
    if backend == "postgres":
        url = onyx_database(request.getfixturevalue("postgres_server"))
    configured = load_settings(
        state_dir=tmp_path, encryption_keys=K1, database_url=url, cluster_id="east"
    )
    store = build_credential_store(configured)
    try:
        user = USER if backend == "sqlite" else str(add_user(store.engine))
        store.ensure(SandboxIdentity("team-a", "alice", "uid-alice"), user_id=user, tenant_id="t")
    finally:
        store.close()
    engine = create_credentials_engine(url)
    with engine.begin() as connection:
        command.downgrade(alembic_config(connection), "0001")

    result = check_key_ring(configured, engine)
    engine.dispose()

    assert result.status is Status.WARN, result
    assert "the stored tokens were not checked against it" in result.detail
    assert "a column is missing" in result.detail
    assert result.fix == "run craft-operator doctor again once the schema is migrated"


def test_a_row_with_an_unreadable_envelope_header_is_named_not_a_crash(
    tmp_path: Path, engine: sa.Engine
) -> None:
    mint(tmp_path, K1, "alice", "bob")
    change_rows(engine, ["bob"], encrypted_token=b"\x07junk")

    result = check_key_ring(settings(tmp_path, K1), engine)

    assert result.status is Status.WARN
    assert "1 row(s) have an unreadable envelope header: team-a/bob" in result.detail


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No CRAFT_*, AWS_* or Kubernetes variables; the state in ``tmp_path``."""
    for name in list(os.environ):
        if name.startswith(("CRAFT_", "AWS_", "KUBERNETES_")) or name == "KUBECONFIG":
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CRAFT_STATE_DIR", str(tmp_path))
    return tmp_path


@pytest.mark.parametrize(
    "ring",
    [f"{CANARY}:k1", f"{K1}\n{CANARY}:k2", f"k1:{CANARY[:-2]}"],
    ids=["wrong way round", "wrong way round second", "key too short"],
)
def test_doctor_never_prints_key_material_of_a_bad_key_ring_file(
    clean_env: Path, monkeypatch: pytest.MonkeyPatch, ring: str
) -> None:
    path = clean_env / "keys"
    path.write_text(ring + "\n", encoding="utf-8")
    monkeypatch.setenv("CRAFT_ENCRYPTION_KEYS_FILE", str(path))

    result = CliRunner().invoke(main, ["doctor", "--skip-kubernetes"], catch_exceptions=False)
    line = format_result(check_key_ring(load_settings()), SYMBOLS)

    assert result.exit_code == 1
    assert f"key ring: key ring file {path}: key ring entry " in result.output
    for text in (result.output, line):
        for form in (CANARY, CANARY[:16], CANARY[-16:]):
            assert form not in text


@pytest.mark.parametrize(
    ("in_a_pod", "peering", "expected"),
    [(False, False, Status.WARN), (True, False, Status.FAIL), (False, True, Status.FAIL)],
    ids=["on a laptop", "in a pod", "peered"],
)
def test_without_keys_doctor_fails_where_run_refuses_the_development_ring(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, in_a_pod: bool, peering: bool, expected: Status
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    if in_a_pod:
        monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    result = check_key_ring(load_settings(state_dir=tmp_path), peering=peering)
    assert result.status is expected
    if expected is Status.FAIL:
        assert "CRAFT_ENCRYPTION_KEYS (or CRAFT_ENCRYPTION_KEYS_FILE) must be set" in result.detail


def test_stored_tokens_that_cannot_be_read_fail_the_key_ring_not_pass_it(
    tmp_path: Path,
) -> None:
    """The ring cannot be judged against tokens the database would not give: not a pass."""
    unreachable = sa.create_engine(f"sqlite:///{tmp_path}/no-such-folder/craft-operator.db")
    try:
        result = check_key_ring(settings(tmp_path, K1), unreachable)
    finally:
        unreachable.dispose()

    assert result.status is Status.FAIL
    assert result.detail.startswith("cannot read the stored tokens: ")
    assert result.fix == "check the database"
