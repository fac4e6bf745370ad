"""Operator settings: defaults, CRAFT_* parsing, and failures that name the variable
without ever echoing a secret."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest

from craft_operator.config import (
    DEFAULT_SANDBOX_RESOURCES,
    Settings,
    SettingsError,
    default_state_dir,
    load_settings,
)

pytestmark = pytest.mark.unit

DB_PASSWORD = "hunter2-Sup3rSecret"
DATABASE_URL = f"postgresql+psycopg://onyx:{DB_PASSWORD}@db.internal:5432/onyx"
KEY_BYTES = bytes(range(32))
KEY_B64 = base64.b64encode(KEY_BYTES).decode()
KEY_RING = f"k2026:{KEY_B64}"


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No CRAFT_* variable from the calling shell; HOME and XDG_STATE_HOME in tmp_path."""
    for name in list(os.environ):
        if name.startswith("CRAFT_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    return tmp_path


def settings_error(monkeypatch: pytest.MonkeyPatch, **variables: str) -> str:
    """The message load_settings raises with ``variables`` set."""
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError) as caught:
        load_settings()
    return str(caught.value)


def test_the_defaults_need_no_environment(clean_environment: Path) -> None:
    settings = load_settings()
    assert settings.namespaces == []
    assert settings.sandbox_image == "craft-sandbox:0.1.0"
    assert settings.server_url is None
    assert settings.encryption_keys is None
    assert settings.s3_bucket is None
    assert settings.s3_endpoint_url is None
    assert settings.metrics_port == 9090
    assert settings.sandbox_resources == DEFAULT_SANDBOX_RESOURCES
    assert settings.operator_namespace == "craft-system"
    assert settings.credential_renewal_grace == 300.0
    state = clean_environment / "state" / "craft-operator"
    assert settings.state_dir == state
    assert settings.database_url_value == f"sqlite:///{state / 'craft-operator.db'}"


def test_multi_tenant_onyx_is_off_unless_craft_onyx_multi_tenant_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert load_settings().onyx_multi_tenant is False
    monkeypatch.setenv("CRAFT_ONYX_MULTI_TENANT", "true")
    assert load_settings().onyx_multi_tenant is True
    monkeypatch.setenv("CRAFT_ONYX_MULTI_TENANT", "maybe")
    assert "CRAFT_ONYX_MULTI_TENANT" in settings_error(monkeypatch)


def test_the_default_resources_are_onyx_s_pod_defaults_and_not_shared() -> None:
    first, second = load_settings(), load_settings()
    assert first.sandbox_resources == {
        "requests": {"cpu": "1", "memory": "2Gi", "ephemeral-storage": "5Gi"},
        "limits": {"cpu": "2", "memory": "10Gi", "ephemeral-storage": "20Gi"},
    }
    assert first.sandbox_resources is not second.sandbox_resources
    assert first.sandbox_resources["limits"] is not DEFAULT_SANDBOX_RESOURCES["limits"]


def test_without_xdg_state_home_the_state_lives_under_home(
    monkeypatch: pytest.MonkeyPatch, clean_environment: Path
) -> None:
    monkeypatch.delenv("XDG_STATE_HOME")
    assert default_state_dir() == clean_environment / "home" / ".local" / "state" / "craft-operator"


def test_the_state_dir_moves_the_default_database(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("CRAFT_STATE_DIR", str(tmp_path / "elsewhere"))
    assert (
        load_settings().database_url_value
        == f"sqlite:///{tmp_path / 'elsewhere'}/craft-operator.db"
    )


@pytest.mark.parametrize(
    ("value", "namespaces"),
    [
        ("", []),
        ("craft", ["craft"]),
        ("team-a,team-b", ["team-a", "team-b"]),
        (" team-a , team-b ,, ", ["team-a", "team-b"]),
    ],
)
def test_namespaces_are_comma_separated(
    monkeypatch: pytest.MonkeyPatch, value: str, namespaces: list[str]
) -> None:
    monkeypatch.setenv("CRAFT_NAMESPACES", value)
    assert load_settings().namespaces == namespaces


def test_every_public_variable_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    variables = {
        "CRAFT_SANDBOX_IMAGE": "registry.example.com/craft-sandbox:1.4.4",
        "CRAFT_SERVER_URL": "https://onyx.example.com",
        "CRAFT_DATABASE_URL": DATABASE_URL,
        "CRAFT_ENCRYPTION_KEYS": KEY_RING,
        "CRAFT_S3_BUCKET": "onyx-user-files",
        "CRAFT_S3_ENDPOINT_URL": "http://minio.minio:9000",
        "CRAFT_METRICS_PORT": "0",
        "CRAFT_SANDBOX_RESOURCES": '{"requests": {"cpu": "500m"}, "limits": {"cpu": "1"}}',
    }
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    settings = load_settings()
    assert settings.sandbox_image == variables["CRAFT_SANDBOX_IMAGE"]
    assert settings.server_url == "https://onyx.example.com"
    assert settings.database_url_value == DATABASE_URL
    assert settings.encryption_keys is not None
    assert settings.encryption_keys.get_secret_value() == KEY_RING
    assert settings.s3_bucket == "onyx-user-files"
    assert settings.s3_endpoint_url == "http://minio.minio:9000"
    assert settings.metrics_port == 0
    assert settings.sandbox_resources == {"requests": {"cpu": "500m"}, "limits": {"cpu": "1"}}


@pytest.mark.parametrize(
    ("variable", "value", "reason"),
    [
        ("CRAFT_METRICS_PORT", "abc", "valid integer"),
        ("CRAFT_METRICS_PORT", "70000", "less than or equal to 65535"),
        ("CRAFT_NAMESPACES", "team-a,Team_B", "'Team_B' is not a valid namespace name"),
        ("CRAFT_SANDBOX_RESOURCES", '{"requests": ', "not valid JSON"),
        ("CRAFT_SANDBOX_RESOURCES", '{"limitz": {}}', "only 'requests' and 'limits'"),
        ("CRAFT_SERVER_URL", "onyx.example.com", "should match pattern"),
        ("CRAFT_S3_ENDPOINT_URL", "minio:9000", "should match pattern"),
        ("CRAFT_SANDBOX_IMAGE", "", "at least 1 character"),
        ("CRAFT_OPERATOR_NAMESPACE", "Craft System", "should match pattern"),
        ("CRAFT_IDLE_CHECK_INTERVAL", "0", "greater than or equal to 1"),
        ("CRAFT_CREDENTIAL_RENEWAL_GRACE", "0", "greater than 0"),
        ("CRAFT_CREDENTIAL_RENEWAL_GRACE", "5m", "valid number"),
    ],
)
def test_a_bad_value_fails_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, reason: str
) -> None:
    message = settings_error(monkeypatch, **{variable: value})
    assert message.startswith("invalid operator settings: ")
    assert f"{variable}: " in message
    assert reason in message
    assert "\n" not in message


def test_every_bad_value_is_reported_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    message = settings_error(
        monkeypatch, CRAFT_METRICS_PORT="abc", CRAFT_SERVER_URL="onyx", CRAFT_NAMESPACES="A"
    )
    for variable in ("CRAFT_METRICS_PORT", "CRAFT_SERVER_URL", "CRAFT_NAMESPACES"):
        assert variable in message


def test_a_bad_value_is_a_settings_error_not_a_validation_traceback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CRAFT_METRICS_PORT", "abc")
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert caught.value.__cause__ is None
    assert caught.value.__suppress_context__


@pytest.mark.parametrize(
    "bad",
    [
        {"CRAFT_METRICS_PORT": "abc"},
        {"CRAFT_SANDBOX_RESOURCES": "{not json"},
        {"CRAFT_NAMESPACES": "Bad_Namespace"},
    ],
    ids=lambda bad: next(iter(bad)),
)
def test_errors_never_contain_the_database_password_or_keys(
    monkeypatch: pytest.MonkeyPatch, bad: dict[str, str]
) -> None:
    message = settings_error(
        monkeypatch, CRAFT_DATABASE_URL=DATABASE_URL, CRAFT_ENCRYPTION_KEYS=KEY_RING, **bad
    )
    assert next(iter(bad)) in message
    assert DB_PASSWORD not in message
    assert KEY_B64 not in message


@pytest.mark.parametrize(
    "key_ring",
    [
        f"k2026:{base64.b64encode(b'sixteen-byte-key').decode()}",  # AES-128 is not enough
        f"k2026:{KEY_B64[:-4]}!!!!",  # not base64
        f"no-separator-{KEY_B64}",
        f"k2026:{KEY_B64},k2026:{KEY_B64}",  # duplicate id
        f"{KEY_B64}:k2026",  # written the wrong way round: the key where the id belongs
    ],
    ids=["short-key", "not-base64", "no-separator", "duplicate-id", "key-colon-id"],
)
def test_a_bad_key_ring_is_named_without_showing_any_key(
    monkeypatch: pytest.MonkeyPatch, key_ring: str
) -> None:
    message = settings_error(monkeypatch, CRAFT_ENCRYPTION_KEYS=key_ring)
    assert "CRAFT_ENCRYPTION_KEYS: " in message
    for secret in key_ring.split(":"):
        if len(secret) > 8:
            assert secret not in message
    assert KEY_B64[:16] not in message


def test_secrets_stay_out_of_repr_and_str(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRAFT_DATABASE_URL", DATABASE_URL)
    monkeypatch.setenv("CRAFT_ENCRYPTION_KEYS", KEY_RING)
    settings = load_settings()
    for text in (repr(settings), str(settings), str(settings.model_dump())):
        assert DB_PASSWORD not in text
        assert KEY_B64 not in text


def test_overrides_win_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRAFT_METRICS_PORT", "9100")
    assert load_settings(metrics_port=9200).metrics_port == 9200


def test_settings_are_frozen() -> None:
    settings = load_settings()
    with pytest.raises(ValueError, match="frozen"):
        settings.metrics_port = 1  # type: ignore[misc]


def test_every_setting_is_documented() -> None:
    undocumented = [name for name, field in Settings.model_fields.items() if not field.description]
    assert undocumented == []


SECONDS_SETTINGS = [
    "CRAFT_CREDENTIAL_RENEWAL_GRACE",
    "CRAFT_ORPHAN_SWEEP_INTERVAL",
    "CRAFT_IDLE_CHECK_INTERVAL",
    "CRAFT_RESYNC_INTERVAL",
    "CRAFT_POD_RESTART_BACKOFF",
    "CRAFT_LIBRARY_SYNC_TIMEOUT",
    "CRAFT_LIBRARY_EXEC_TIMEOUT",
    "CRAFT_PROVISIONING_TIMEOUT",
]


@pytest.mark.parametrize("variable", SECONDS_SETTINGS)
@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("inf", "finite number"),
        ("-inf", "finite number"),
        ("nan", "finite number"),
        ("1e400", "finite number"),
        ("1e20", "less than or equal to 31536000"),
        ("31536001", "less than or equal to 31536000"),
    ],
)
def test_a_setting_in_seconds_must_be_finite_and_at_most_a_year(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, reason: str
) -> None:
    message = settings_error(monkeypatch, CRAFT_DATABASE_URL=DATABASE_URL, **{variable: value})
    assert f"{variable}: " in message
    assert reason in message
    assert DB_PASSWORD not in message


def test_a_setting_of_a_year_in_seconds_is_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in SECONDS_SETTINGS:
        monkeypatch.setenv(variable, "31536000")
    assert load_settings().credential_renewal_grace == 31536000.0


@pytest.mark.parametrize(
    ("resources", "reason"),
    [
        ('{"requests": {"cpu": "lots"}}', "requests.cpu must be a Kubernetes quantity"),
        ('{"limits": {"memory": "1e1.5"}}', "limits.memory must be a Kubernetes quantity"),
        ('{"limits": {"memory": "-1Gi"}}', "limits.memory must be 0 or more"),
        ('{"limits": {"memory": "99999Ei"}}', "limits.memory must be 0 or more and less than 8Pi"),
        ('{"requests": {"bad key": "1"}}', "requests: 'bad key' is not a container resource"),
        ('{"requests": {"gpu": "1"}}', "requests: 'gpu' is not a container resource"),
    ],
)
def test_a_default_resource_must_be_a_container_resource_and_a_quantity(
    monkeypatch: pytest.MonkeyPatch, resources: str, reason: str
) -> None:
    message = settings_error(monkeypatch, CRAFT_SANDBOX_RESOURCES=resources)
    assert "CRAFT_SANDBOX_RESOURCES: " in message
    assert reason in message


def test_default_resources_with_extended_and_hugepage_resources_are_accepted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    resources = '{"limits": {"hugepages-2Mi": "1Gi", "nvidia.com/gpu": "1"}}'
    monkeypatch.setenv("CRAFT_SANDBOX_RESOURCES", resources)
    assert load_settings().sandbox_resources["limits"]["nvidia.com/gpu"] == "1"


@pytest.mark.parametrize(
    ("resources", "said"),
    [
        ('{"requests": {"nvidia.com/gpu": "1"}}', "limits.nvidia.com/gpu must be set"),
        ('{"requests": {"hugepages-2Mi": "1Gi"}}', "limits.hugepages-2Mi must be set"),
        (
            '{"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "2"}}',
            "must equal",
        ),
        ('{"limits": {"nvidia.com/gpu": "500m"}}', "whole number of devices"),
        ('{"limits": {"hugepages-2Mi": "3Mi"}}', "whole number of pages"),
    ],
)
def test_default_resources_every_pod_would_be_refused_for_stop_the_start(
    monkeypatch: pytest.MonkeyPatch, resources: str, said: str
) -> None:
    message = settings_error(monkeypatch, CRAFT_SANDBOX_RESOURCES=resources)
    assert "CRAFT_SANDBOX_RESOURCES" in message
    assert said in message


@pytest.mark.parametrize("variable", ["CRAFT_SANDBOX_IMAGE", "CRAFT_OPERATOR_IMAGE"])
@pytest.mark.parametrize("image", ["craft sandbox:1", "craft\u00a0sandbox:1", "craft\vsandbox:1"])
def test_a_default_image_must_not_contain_spaces(
    monkeypatch: pytest.MonkeyPatch, variable: str, image: str
) -> None:
    message = settings_error(monkeypatch, **{variable: image})
    assert f"{variable}: must be an image reference without spaces" in message


@pytest.mark.parametrize("bucket", ["Not_A_Bucket!", "ab", "-bucket", "bucket\n", "a b c"])
def test_the_default_bucket_must_be_an_s3_bucket_name(
    monkeypatch: pytest.MonkeyPatch, bucket: str
) -> None:
    message = settings_error(monkeypatch, CRAFT_S3_BUCKET=bucket)
    assert "CRAFT_S3_BUCKET: must be an S3 bucket name" in message


@pytest.mark.parametrize(
    "region", ["eu west 1", "eu_west_1", "-eu-west-1", "eu-west-1-", "2024", "a" * 64]
)
def test_the_s3_region_must_be_one_botocore_takes(
    monkeypatch: pytest.MonkeyPatch, region: str
) -> None:
    message = settings_error(monkeypatch, CRAFT_S3_REGION=region)
    assert message.count("\n") == 0
    assert "CRAFT_S3_REGION: must be an S3 region such as us-east-1" in message


@pytest.mark.parametrize("variable", ["CRAFT_S3_ENDPOINT_URL", "CRAFT_LIBRARY_STS_ENDPOINT_URL"])
def test_an_endpoint_carrying_credentials_is_refused_without_quoting_them(
    monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    """They would authenticate nothing (S3 signs with AWS_* keys) and be quoted where an
    endpoint is: doctor's line, botocore's errors, a sync Job's spec."""
    message = settings_error(monkeypatch, **{variable: "http://minio:SECRETPW@minio:9000"})
    assert f"{variable}: must not carry credentials" in message
    assert "SECRETPW" not in message


def test_an_endpoint_without_credentials_is_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CRAFT_S3_ENDPOINT_URL", "http://minio.craft-system:9000")
    assert load_settings().s3_endpoint_url == "http://minio.craft-system:9000"


@pytest.mark.parametrize("region", ["us-east-1", "eu-central-2", "EU-WEST-1", "local"])
def test_a_region_botocore_takes_starts_the_operator(
    monkeypatch: pytest.MonkeyPatch, region: str
) -> None:
    monkeypatch.setenv("CRAFT_S3_REGION", region)
    assert load_settings().s3_region == region


@pytest.mark.parametrize(
    "reference", ["craft-system/skill\n", "craft-system\n/skill", "craft-system/a..b"]
)
def test_the_skill_template_configmap_must_be_exactly_namespace_and_name(
    monkeypatch: pytest.MonkeyPatch, reference: str
) -> None:
    message = settings_error(monkeypatch, CRAFT_SKILL_TEMPLATE_CONFIGMAP=reference)
    assert "CRAFT_SKILL_TEMPLATE_CONFIGMAP: must be namespace/name of a ConfigMap" in message


@pytest.mark.parametrize("size", ["0", "0Gi"])
def test_the_library_volume_size_must_be_at_least_a_byte(
    monkeypatch: pytest.MonkeyPatch, size: str
) -> None:
    message = settings_error(monkeypatch, CRAFT_LIBRARY_VOLUME_SIZE=size)
    assert "CRAFT_LIBRARY_VOLUME_SIZE: the size must be at least 1" in message


def test_a_legacy_default_bucket_name_still_starts_the_operator(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CRAFT_S3_BUCKET", "Legacy_Team_Files")
    assert Settings().s3_bucket == "Legacy_Team_Files"


@pytest.mark.parametrize(
    "url",
    [
        "postgresql+psycopg://craft:pa@ssSECRET@127.0.0.1:5432/onyx",
        "postgresql+psycopg://onyx:pwA1@SECRETHOST/SECRETDB@db.internal:5432/onyx",
        "postgresql+psycopg://craft:pw@127.0.0.1:54x/onyx",
        "postgresql+psycopg://craft:pw@127.0.0.1:/onyx",
        "postgresql+psycopg://craft:Xk9@ab3?Qz7@SECRET.example:5432/onyx",
        "mysql://craft:SECRET@127.0.0.1/onyx",
        "",
        "postgresql+psycopg://craft:SECRET@db:5432/onyx\n",
        "sqlite:////var/lib/craft/SECRET.db\n",
        " postgresql+psycopg://craft:SECRET@db:5432/onyx",
        "postgresql+psycopg://craft:SECRET@db:5432/on\tyx",
    ],
    ids=[
        "at-sign",
        "at-sign-then-slash",
        "port-not-a-number",
        "empty-port",
        "at-sign-then-question-mark",
        "not-postgres",
        "empty",
        "newline-at-the-end-of-a-secret-file",
        "sqlite-file-name-with-a-newline",
        "leading-space",
        "control-character",
    ],
)
def test_a_database_url_no_parser_would_read_right_stops_the_start_without_quoting_it(
    clean_environment: Path, monkeypatch: pytest.MonkeyPatch, url: str
) -> None:
    message = settings_error(monkeypatch, CRAFT_DATABASE_URL=url)
    assert "CRAFT_DATABASE_URL: " in message
    assert "SECRET" not in message


@pytest.mark.parametrize(
    "url",
    [
        "postgresql+psycopg://craft:pa%40ss@db.internal:5432/onyx",
        "postgresql://onyx@[::1]/onyx?sslmode=require",
        "sqlite:////var/lib/craft/credentials.db",
        "sqlite:///relative.db",
        # A generated password with / and + in it: SQLAlchemy ends a password at its "@".
        "postgresql+psycopg://craft:Zm9v/YmFy+cXV4@onyx-db:5432/onyx",
        "postgresql+psycopg://craft:pw@db/onyx?application_name=craft@prod",
        "postgresql+psycopg://craft@server:pw@db.postgres.azure.com:5432/onyx",
        "postgresql+psycopg://craft@/onyx?host=/var/run/postgresql",
        "postgresql+psycopg://craft:pw@db-1,db-2:5432/onyx",
    ],
)
def test_database_urls_written_right_are_taken(
    clean_environment: Path, monkeypatch: pytest.MonkeyPatch, url: str
) -> None:
    monkeypatch.setenv("CRAFT_DATABASE_URL", url)
    assert load_settings().database_url_value == url


def test_an_empty_s3_region_is_none_as_botocore_takes_it(
    clean_environment: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A templated ConfigMap's blank value worked before the region was checked."""
    monkeypatch.setenv("CRAFT_S3_REGION", "")
    assert load_settings().s3_region is None


def test_a_peering_lifetime_that_may_expire_before_kopf_renews_it_stops_the_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # kopf renews the keep-alive 5 to 10 s before it expires, every second at the most: a
    # shorter lifetime lets a standby take over from an active replica that works on.
    message = settings_error(monkeypatch, CRAFT_PEERING_LIFETIME="14")
    assert "CRAFT_PEERING_LIFETIME: Input should be greater than or equal to 15" in message
    monkeypatch.setenv("CRAFT_PEERING_LIFETIME", "15")
    assert load_settings().peering_lifetime == 15


@pytest.mark.parametrize(
    ("variable", "value", "reason"),
    [
        ("CRAFT_ORPHAN_SWEEP_INTERVAL", "0.001", "must be 0 (no sweeps) or at least 60"),
        ("CRAFT_ORPHAN_SWEEP_INTERVAL", "59", "must be 0 (no sweeps) or at least 60"),
        ("CRAFT_RESYNC_INTERVAL", "0.001", "greater than or equal to 1"),
        ("CRAFT_IDLE_CHECK_INTERVAL", "0.5", "greater than or equal to 1"),
        ("CRAFT_PROVISIONING_TIMEOUT", "0.5", "greater than or equal to 1"),
        # Doubling from a nanosecond, a crashing pod was replaced ~30 times back to back.
        ("CRAFT_POD_RESTART_BACKOFF", "0.000000001", "greater than or equal to 0.1"),
        ("CRAFT_POD_RESTART_BACKOFF", "0.09", "greater than or equal to 0.1"),
    ],
)
def test_an_interval_short_enough_to_make_a_hot_loop_stops_the_start(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, reason: str
) -> None:
    # 0.001 s between sweeps, with the database down, logged a failure every millisecond.
    message = settings_error(monkeypatch, **{variable: value})
    assert f"{variable}: " in message
    assert reason in message


@pytest.mark.parametrize(
    ("variable", "value", "reason"),
    [
        # No worker: the operator starts and reconciles nothing, silently.
        ("CRAFT_WORKERS", "0", "greater than or equal to 1"),
        ("CRAFT_WORKERS", "257", "less than or equal to 256"),
        # No slot: every Exec-mode sync waits for ever.
        ("CRAFT_LIBRARY_SYNC_CONCURRENCY", "0", "greater than or equal to 1"),
        ("CRAFT_LIBRARY_SYNC_CONCURRENCY", "257", "less than or equal to 256"),
        # A failed pod replaced at once, without end.
        ("CRAFT_POD_RESTART_BACKOFF", "0", "greater than or equal to 0.1"),
        # A PAT always due for renewal: one minted on every pass.
        ("CRAFT_CREDENTIAL_RENEWAL_FRACTION", "1", "less than 1"),
        ("CRAFT_CREDENTIAL_RENEWAL_FRACTION", "0", "greater than 0"),
        ("CRAFT_MAX_POD_FAILURES", "0", "greater than or equal to 1"),
        # A sync or its command abandoned as it starts, and retried.
        ("CRAFT_LIBRARY_SYNC_TIMEOUT", "0", "greater than 0"),
        ("CRAFT_LIBRARY_EXEC_TIMEOUT", "0", "greater than 0"),
        ("CRAFT_LIBRARY_MANIFEST_MAX_BYTES", "1023", "greater than or equal to 1024"),
        ("CRAFT_LIBRARY_MAX_FILES", "0", "greater than 0"),
        # A replica that died keeps its standby waiting for hours.
        ("CRAFT_PEERING_LIFETIME", "3601", "less than or equal to 3600"),
    ],
)
def test_a_value_that_would_stall_or_spin_the_operator_stops_the_start(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, reason: str
) -> None:
    message = settings_error(monkeypatch, **{variable: value})
    assert f"{variable}: " in message
    assert reason in message


def test_the_bounds_of_the_workers_syncs_and_peering_lifetime_are_taken(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for variable, value in {
        "CRAFT_WORKERS": "256",
        "CRAFT_LIBRARY_SYNC_CONCURRENCY": "256",
        "CRAFT_MAX_POD_FAILURES": "1",
        "CRAFT_LIBRARY_MANIFEST_MAX_BYTES": "1024",
        "CRAFT_PEERING_LIFETIME": "3600",
        "CRAFT_CREDENTIAL_RENEWAL_FRACTION": "0.99",
    }.items():
        monkeypatch.setenv(variable, value)
    settings = load_settings()
    assert (settings.workers, settings.library_sync_concurrency) == (256, 256)
    assert (settings.max_pod_failures, settings.library_manifest_max_bytes) == (1, 1024)
    assert (settings.peering_lifetime, settings.credential_renewal_fraction) == (3600, 0.99)
    monkeypatch.setenv("CRAFT_WORKERS", "1")
    monkeypatch.setenv("CRAFT_LIBRARY_SYNC_CONCURRENCY", "1")
    assert (load_settings().workers, load_settings().library_sync_concurrency) == (1, 1)


def test_the_shortest_intervals_allowed_and_no_orphan_sweep_start_the_operator(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CRAFT_ORPHAN_SWEEP_INTERVAL", "60")
    monkeypatch.setenv("CRAFT_POD_RESTART_BACKOFF", "0.1")
    for variable in (
        "CRAFT_RESYNC_INTERVAL",
        "CRAFT_IDLE_CHECK_INTERVAL",
        "CRAFT_PROVISIONING_TIMEOUT",
    ):
        monkeypatch.setenv(variable, "1")
    settings = load_settings()
    assert (settings.orphan_sweep_interval, settings.resync_interval) == (60.0, 1.0)
    assert settings.pod_restart_backoff == 0.1
    monkeypatch.setenv("CRAFT_ORPHAN_SWEEP_INTERVAL", "0")
    assert load_settings().orphan_sweep_interval == 0.0


def test_a_sync_timeout_the_scoped_credentials_would_not_outlive_stops_the_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # STS gives a session 12 h at most: a Job's S3 credentials expired mid-sync.
    role = "arn:aws:iam::123456789012:role/craft-library-reader"
    message = settings_error(
        monkeypatch, CRAFT_LIBRARY_JOB_ROLE_ARN=role, CRAFT_LIBRARY_SYNC_TIMEOUT="42901"
    )
    assert "CRAFT_LIBRARY_SYNC_TIMEOUT: must be at most 42900 with CRAFT_LIBRARY_JOB_ROLE_ARN" in (
        message
    )
    monkeypatch.setenv("CRAFT_LIBRARY_SYNC_TIMEOUT", "42900")
    assert load_settings().library_sync_timeout == 42900.0
    monkeypatch.delenv("CRAFT_LIBRARY_JOB_ROLE_ARN")
    monkeypatch.setenv("CRAFT_LIBRARY_SYNC_TIMEOUT", "86400")  # the shared Secret's keys last
    assert load_settings().library_sync_timeout == 86400.0


@pytest.mark.parametrize("value", ["33554433", "67108864", "1073741824"])
def test_a_manifest_cap_over_32_mib_stops_the_start_naming_the_setting(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    """Over the exec transport's own 64 MiB cap on output, any manifest past it would be
    resynced in full whatever the setting said; 32 MiB leaves room for the command's own."""
    message = settings_error(
        monkeypatch, CRAFT_DATABASE_URL=DATABASE_URL, CRAFT_LIBRARY_MANIFEST_MAX_BYTES=value
    )
    assert "CRAFT_LIBRARY_MANIFEST_MAX_BYTES: " in message
    assert "less than or equal to 33554432" in message
