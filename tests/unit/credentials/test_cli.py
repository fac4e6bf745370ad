"""The keys, db and credentials commands, run through the real CLI on an embedded database
(on Postgres where a test is marked so)."""

from __future__ import annotations

import base64
import importlib
import json
from collections.abc import Iterable
from pathlib import Path

import pytest
import sqlalchemy as sa
from alembic import command
from click.testing import CliRunner, Result

from craft_operator.cli import main
from craft_operator.config import load_settings
from craft_operator.credentials import (
    IssuedCredential,
    KeyRing,
    SandboxIdentity,
    build_credential_store,
    generate_key_entry,
)
from craft_operator.credentials.db import alembic_config, head_revision, upgrade
from craft_operator.credentials.tables import SandboxCredential
from craft_operator.kube.connection import ClusterUnreachableError
from tests.support.postgres import long_reader

from .conftest import Database

USER = "3f2b8c1e-9d4a-4e6b-8f0a-1c2d3e4f5a6b"
SANDBOX = SandboxIdentity("team-a", "alice", "uid-alice")


@pytest.fixture
def env(tmp_path: Path, key_entry: str) -> dict[str, str]:
    return {"CRAFT_STATE_DIR": str(tmp_path), "CRAFT_ENCRYPTION_KEYS": key_entry}


def run(env: dict[str, str], *args: str) -> Result:
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


def mint(env: dict[str, str]) -> IssuedCredential:
    store = build_credential_store(
        load_settings(
            state_dir=Path(env["CRAFT_STATE_DIR"]), encryption_keys=env["CRAFT_ENCRYPTION_KEYS"]
        )
    )
    try:
        return store.ensure(SANDBOX, user_id=USER, tenant_id="public")
    finally:
        store.close()


def test_keys_generate_prints_one_usable_entry() -> None:
    result = CliRunner().invoke(main, ["keys", "generate", "--id", "prod-2026"])

    assert result.exit_code == 0
    entry = result.output.strip()
    assert KeyRing.parse(entry).key_ids == ("prod-2026",)


def test_keys_generate_refuses_a_bad_id_in_one_line() -> None:
    result = CliRunner().invoke(main, ["keys", "generate", "--id", "no spaces"])

    assert result.exit_code == 2
    assert result.output.count("\n") == 1
    assert "is invalid" in result.output


def test_keys_generate_refuses_an_id_with_a_trailing_newline() -> None:
    # Accepted, it printed an entry "k1\n:<key>" that no key ring parses.
    result = CliRunner().invoke(main, ["keys", "generate", "--id", "k1\n"])

    assert result.exit_code == 2
    assert result.output == (
        "craft-operator: the key id is invalid: use 1-64 letters, digits, '.', '_' or '-', "
        "starting with a letter or digit\n"
    )


def test_db_upgrade_migrates_then_reports_nothing_to_do(env: dict[str, str]) -> None:
    first = run(env, "db", "upgrade")
    second = run(env, "db", "upgrade")

    assert first.exit_code == 0
    assert "embedded SQLite" in first.output
    assert "created table personal_access_token" in first.output
    assert f"migrated from revision none to {head_revision()}" in first.output
    assert f"already at revision {head_revision()}" in second.output


def test_db_upgrade_where_the_database_cannot_be_made_is_a_setting_error_exit_2(
    env: dict[str, str], tmp_path: Path
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")

    result = run({**env, "CRAFT_STATE_DIR": str(blocker / "state")}, "db", "upgrade")

    assert result.exit_code == 2
    assert "cannot create the SQLite database's folder" in result.output
    assert "migrated" not in result.output


def test_a_home_relative_sqlite_url_is_the_file_in_the_home_folder_for_every_command(
    env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """doctor and the commands' checks expanded ~, the engine opened ./~/craft.db."""
    home, elsewhere = tmp_path / "home", tmp_path / "elsewhere"
    home.mkdir()
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    env = {**env, "HOME": str(home), "CRAFT_DATABASE_URL": "sqlite:///~/craft.db"}

    before = run(env, "doctor", "--skip-kubernetes")
    upgrade = run(env, "db", "upgrade")
    after = run(env, "credentials", "show", "team-a/nobody")

    assert "✔ database: sqlite:///~/craft.db does not exist yet" in before.output
    assert upgrade.exit_code == 0, upgrade.output
    assert (home / "craft.db").is_file()
    assert list(elsewhere.iterdir()) == []
    assert after.output == "craft-operator: no credential is stored for sandbox team-a/nobody\n"


@pytest.mark.postgres
def test_db_upgrade_behind_a_long_reader_fails_in_one_line_and_succeeds_once_it_is_done(
    onyx_database: Database, env: dict[str, str]
) -> None:
    upgrade(onyx_database.engine)
    with onyx_database.engine.begin() as connection:
        command.downgrade(alembic_config(connection), "0006_cluster_key_repair")
    # The session's own lock_timeout, shorter than a migration's 5 s, is kept.
    env = {**env, "CRAFT_DATABASE_URL": onyx_database.url + "?options=-c%20lock_timeout%3D1s"}

    with long_reader(onyx_database.url):
        blocked = run(env, "db", "upgrade")
    done = run(env, "db", "upgrade")

    assert blocked.exit_code == 1
    assert blocked.output.count("\n") == 1
    assert "another client holds a lock on craft_sandbox_credential" in blocked.output
    assert "run craft-operator db upgrade again once that client is done" in blocked.output
    assert done.exit_code == 0
    assert f"migrated from revision 0006_cluster_key_repair to {head_revision()}" in done.output


def test_credentials_show_prints_the_display_form_never_the_token(env: dict[str, str]) -> None:
    issued = mint(env)

    text_output = run(env, "credentials", "show", "team-a/alice")
    json_output = run(env, "credentials", "show", "team-a/alice", "-o", "json")

    assert text_output.exit_code == 0
    assert issued.token_display in text_output.output
    assert f"patID:        {issued.pat_id}" in text_output.output
    assert issued.token.get_secret_value() not in text_output.output + json_output.output
    fields = json.loads(json_output.output)
    assert fields["patState"] == "live"
    assert fields["expiresAt"] == issued.expires_at.isoformat()


def test_credentials_show_of_an_unknown_sandbox_fails_in_one_line(env: dict[str, str]) -> None:
    run(env, "db", "upgrade")

    result = run(env, "credentials", "show", "team-a/nobody")

    assert result.exit_code == 1
    assert result.output == "craft-operator: no credential is stored for sandbox team-a/nobody\n"


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, int]]:
    """The CraftSandboxes `credentials revoke` annotates for a fresh PAT now."""
    calls: list[tuple[str, str, int]] = []

    async def ask_for_a_fresh_pat(namespace: str, name: str, pat_id: int) -> None:
        calls.append((namespace, name, pat_id))

    module = importlib.import_module("craft_operator.cli.credentials")
    monkeypatch.setattr(module, "ask_for_a_fresh_pat", ask_for_a_fresh_pat)
    return calls


def test_credentials_revoke_asks_the_operator_for_a_fresh_pat_at_once(
    env: dict[str, str], asked: list[tuple[str, str, int]]
) -> None:
    issued = mint(env)

    result = run(env, "credentials", "revoke", "team-a/alice")

    assert asked == [("team-a", "alice", issued.pat_id)]
    assert f"craft.onyx.app/pat-revoked={issued.pat_id} on the CraftSandbox" in result.output


@pytest.mark.parametrize(
    "problem",
    [
        ClusterUnreachableError("no kubeconfig and not in a pod"),
        ValueError("Cannot combine AUTHORIZATION header with credentials encoded in URL"),
    ],
    ids=["no cluster", "a connection aiohttp cannot use"],
)
def test_a_revoke_without_a_cluster_to_ask_says_when_the_fresh_pat_comes(
    env: dict[str, str], monkeypatch: pytest.MonkeyPatch, problem: Exception
) -> None:
    async def unreachable(namespace: str, name: str, pat_id: int) -> None:
        raise problem

    module = importlib.import_module("craft_operator.cli.credentials")
    monkeypatch.setattr(module, "ask_for_a_fresh_pat", unreachable)
    issued = mint(env)

    result = CliRunner().invoke(
        main, ["credentials", "revoke", "team-a/alice"], env=env, catch_exceptions=False
    )

    assert result.exit_code == 0  # the PAT is revoked all the same
    assert f"revoked PAT {issued.pat_id}" in result.stdout
    assert "within CRAFT_RESYNC_INTERVAL" in result.stderr


def write_kubeconfig(directory: Path, cluster: dict[str, str]) -> Path:
    """A kubeconfig whose current context is ``cluster``, with a token."""
    kubeconfig = directory / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "c",
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "clusters": [{"name": "c", "cluster": cluster}],
                "users": [{"name": "u", "user": {"token": "abc"}}],
            }
        )
    )
    return kubeconfig


#: Server URLs aiohttp refuses with a ValueError (a traceback, once).
MALFORMED_SERVERS = [
    {"server": "https://127.0.0.1:http"},
    {"server": "https://127.0.0.1:99999"},
    {"server": "https://[::1"},
    {"server": "https://bob:secret@127.0.0.1:1"},
]
MALFORMED_SERVER_IDS = ["port not a number", "port too high", "unclosed bracket", "user:password@"]


@pytest.mark.parametrize(
    "cluster",
    [
        {"server": "https://127.0.0.1:1", "certificate-authority": "/nonexistent/ca.crt"},
        {
            "server": "https://127.0.0.1:1",
            "certificate-authority-data": base64.b64encode(b"not a certificate").decode(),
        },
        *MALFORMED_SERVERS,
    ],
    ids=["CA file gone", "CA data not a certificate", *MALFORMED_SERVER_IDS],
)
def test_a_revoke_with_an_unusable_kubeconfig_says_so_after_revoking(
    env: dict[str, str], tmp_path: Path, cluster: dict[str, str]
) -> None:
    """A kubeconfig copied from another machine: the PAT is revoked, so the command must
    not read as failed (run again, it would say nothing was revoked)."""
    kubeconfig = write_kubeconfig(tmp_path, cluster)
    issued = mint(env)

    result = CliRunner().invoke(
        main,
        ["credentials", "revoke", "team-a/alice"],
        env={**env, "KUBECONFIG": str(kubeconfig)},
        catch_exceptions=False,
    )

    assert result.exit_code == 0
    assert f"revoked PAT {issued.pat_id}" in result.stdout
    assert "could not ask the operator for a fresh PAT" in result.stderr
    assert "fix the kubeconfig" in result.stderr
    assert "secret" not in result.stderr


def test_credentials_revoke_revokes_and_a_second_revoke_finds_nothing(
    env: dict[str, str], asked: list[tuple[str, str, int]]
) -> None:
    issued = mint(env)

    first = run(env, "credentials", "revoke", "team-a/alice")
    second = run(env, "credentials", "revoke", "team-a/alice")

    assert first.exit_code == 0
    assert f"revoked PAT {issued.pat_id} ({issued.token_display})" in first.output
    assert second.exit_code == 1
    assert "nothing was revoked" in second.output
    assert mint(env).pat_id != issued.pat_id


def test_credentials_revoke_of_a_pat_no_longer_in_onyx_says_it_revoked_nothing(
    env: dict[str, str], asked: list[tuple[str, str, int]]
) -> None:
    issued = mint(env)
    engine = sa.create_engine(f"sqlite:///{env['CRAFT_STATE_DIR']}/craft-operator.db")
    with engine.begin() as connection:  # deleted in Onyx
        connection.execute(sa.text("DELETE FROM personal_access_token"))
    engine.dispose()

    result = run(env, "credentials", "revoke", "team-a/alice")

    assert result.exit_code == 0
    assert f"revoked PAT {issued.pat_id}" not in result.output
    assert (
        "forgot the credential of sandbox team-a/alice; nothing was revoked: its PAT "
        f"{issued.pat_id} ({issued.token_display}) is not in Onyx"
    ) in result.output
    assert asked == [("team-a", "alice", issued.pat_id)], "the sandbox needs a fresh PAT"


def test_a_sandbox_argument_without_a_slash_is_a_usage_error(env: dict[str, str]) -> None:
    result = run(env, "credentials", "revoke", "alice")

    assert result.exit_code == 2
    assert "NAMESPACE/NAME" in result.output


def test_keys_rotate_re_encrypts_under_the_new_first_key(env: dict[str, str]) -> None:
    issued = mint(env)
    new_entry = generate_key_entry("k2").get_secret_value()
    env = {**env, "CRAFT_ENCRYPTION_KEYS": f"{new_entry},{env['CRAFT_ENCRYPTION_KEYS']}"}

    result = run(env, "keys", "rotate")

    assert result.exit_code == 0
    assert "re-encrypted 1 stored token(s) under key 'k2'" in result.output
    assert "stored tokens by key: k2: 1" in result.output
    env_new_only = {**env, "CRAFT_ENCRYPTION_KEYS": new_entry}
    assert mint(env_new_only).token.get_secret_value() == issued.token.get_secret_value()


def test_keys_rotate_fails_while_any_token_was_skipped(env: dict[str, str]) -> None:
    mint(env)  # sealed with the ring of ``env``, which the command below no longer has
    stranger = {**env, "CRAFT_ENCRYPTION_KEYS": generate_key_entry("k9").get_secret_value()}

    result = run(stranger, "keys", "rotate")

    assert result.exit_code == 1
    assert "skipped:" in result.output
    assert "1 token(s) could not be decrypted and were left as they are" in result.output
    assert "stored tokens by key: k1: 1" in result.output


def test_a_malformed_key_ring_stops_a_command_without_echoing_the_key(
    env: dict[str, str],
) -> None:
    secretish = "A" * 20
    bad = {**env, "CRAFT_ENCRYPTION_KEYS": f"k1:{secretish}"}

    result = run(bad, "credentials", "show", "team-a/alice")

    assert result.exit_code == 2
    assert "CRAFT_ENCRYPTION_KEYS" in result.output
    assert secretish not in result.output


def forget_clusters(env: dict[str, str]) -> sa.Engine:
    """Make every row one written before cluster ids were recorded; the database's engine."""
    engine = sa.create_engine(f"sqlite:///{env['CRAFT_STATE_DIR']}/craft-operator.db")
    with engine.begin() as connection:
        connection.execute(sa.update(SandboxCredential).values(cluster_id=None))
    return engine


@pytest.fixture
def this_cluster(monkeypatch: pytest.MonkeyPatch) -> dict[tuple[str, str], str]:
    """The CraftSandboxes of the cluster `credentials adopt` asks: (namespace, name): uid."""
    sandboxes: dict[tuple[str, str], str] = {}

    async def live_sandbox_uids(keys: Iterable[tuple[str, str]]) -> dict[tuple[str, str], str]:
        return {key: sandboxes[key] for key in keys if key in sandboxes}

    # The module, not the click group of the same name that craft_operator.cli exports.
    module = importlib.import_module("craft_operator.cli.credentials")
    monkeypatch.setattr(module, "live_sandbox_uids", live_sandbox_uids)
    return sandboxes


def test_credentials_adopt_claims_a_row_whose_sandbox_lives_here_once(
    env: dict[str, str], this_cluster: dict[tuple[str, str], str]
) -> None:
    mint(env)
    engine = forget_clusters(env)
    this_cluster[("team-a", "alice")] = SANDBOX.uid
    east = {**env, "CRAFT_CLUSTER_ID": "east"}

    dry = run(east, "credentials", "adopt", "--dry-run")
    first = run(east, "credentials", "adopt")
    second = run(east, "credentials", "adopt")

    assert dry.output.splitlines()[-1] == "would adopt 1 credential rows as cluster 'east'"
    assert first.output.splitlines()[-1] == "adopted 1 credential rows as cluster 'east'"
    assert second.output.strip() == "adopted 0 credential rows as cluster 'east'"
    with engine.connect() as connection:
        assert connection.execute(sa.select(SandboxCredential.cluster_id)).scalars().all() == [
            "east"
        ]
    engine.dispose()


@pytest.mark.parametrize(
    "here",
    [{}, {("team-a", "alice"): "uid-of-this-cluster-s-alice"}],
    ids=["no-such-sandbox-here", "a-namesake-with-another-uid"],
)
def test_credentials_adopt_leaves_another_cluster_s_row_alone(
    env: dict[str, str],
    this_cluster: dict[tuple[str, str], str],
    here: dict[tuple[str, str], str],
) -> None:
    mint(env)  # as another cluster's operator, before cluster ids, wrote it
    engine = forget_clusters(env)
    this_cluster.update(here)

    result = run({**env, "CRAFT_CLUSTER_ID": "east"}, "credentials", "adopt")

    assert result.output.splitlines()[0].startswith("left team-a/alice (PAT ")
    assert result.output.splitlines()[-1] == "adopted 0 credential rows as cluster 'east'"
    with engine.connect() as connection:
        assert connection.execute(sa.select(SandboxCredential.cluster_id)).scalars().all() == [None]
    engine.dispose()


@pytest.mark.parametrize("cluster", MALFORMED_SERVERS, ids=MALFORMED_SERVER_IDS)
def test_credentials_adopt_with_a_malformed_server_url_fails_in_one_line(
    env: dict[str, str], tmp_path: Path, cluster: dict[str, str]
) -> None:
    mint(env)
    forget_clusters(env).dispose()
    kubeconfig = write_kubeconfig(tmp_path, cluster)

    result = run({**env, "KUBECONFIG": str(kubeconfig)}, "credentials", "adopt")

    assert result.exit_code == 1
    [message] = result.stderr.splitlines()
    assert message.startswith(
        "craft-operator: cannot read this cluster's CraftSandboxes, nothing was adopted: "
        "the kubeconfig's API server URL "
    )
    assert message.endswith(": fix the kubeconfig")
    assert "secret" not in message
