"""Operator settings, read from ``CRAFT_*`` environment variables.

Every setting is documented in the README's settings table. A bad value stops the operator
at start with a message naming the variable (:func:`load_settings`), never a traceback, and
never echoing a secret's value.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import ErrorDetails
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict
from pydantic_settings import SettingsError as SourceParseError

from craft_operator.api.base import check_pattern, check_quantity
from craft_operator.api.constants import (
    DNS_LABEL_PATTERN,
    IMAGE_PATTERN,
    URL_PATTERN,
)
from craft_operator.api.constants import DNS_SUBDOMAIN_PATTERN as DNS_SUBDOMAIN_PATTERN
from craft_operator.api.spec import is_resource_name
from craft_operator.builders.quantities import overcommit_problem

ENV_PREFIX = "CRAFT_"
#: The cluster id of rows in the embedded SQLite database when CRAFT_CLUSTER_ID is unset.
EMBEDDED_CLUSTER_ID = "embedded"

#: The longest a setting in seconds may be: one year (also keeps it far from what
#: ``timedelta`` and ``int()`` can hold; ``inf`` and ``nan`` are refused outright).
MAX_SECONDS = 365 * 24 * 3600.0
#: A setting in seconds: finite, and at most :data:`MAX_SECONDS`.
Seconds = Annotated[float, Field(le=MAX_SECONDS, allow_inf_nan=False)]

#: The longest session STS gives a role (its ``MaxSessionDuration`` at most), and how long
#: a sync Job's scoped session outlives the Job's deadline: with CRAFT_LIBRARY_JOB_ROLE_ARN
#: set, a sync may take at most the difference, or its S3 credentials would expire mid-sync.
MAX_SCOPED_SESSION_SECONDS = 43_200
SCOPED_SESSION_SLACK_SECONDS = 300
MAX_SCOPED_SYNC_TIMEOUT = MAX_SCOPED_SESSION_SECONDS - SCOPED_SESSION_SLACK_SECONDS
#: The shortest CRAFT_PEERING_LIFETIME: see the setting.
MIN_PEERING_LIFETIME = 15
#: The shortest interval or timeout in seconds of the reconciler's own clocks (resync, idle
#: check, provisioning): a fraction of a second revisits every sandbox back to back.
MIN_INTERVAL = 1.0
#: The shortest CRAFT_POD_RESTART_BACKOFF. Doubling per failure, a nanosecond's backoff still
#: replaced a crashing or refused pod some thirty times back to back before the wait grew to
#: matter; from 0.1 s it is tried at most four times in its first second. Under
#: MIN_INTERVAL, so that the tests can replace pods quickly (they use 0.2 s).
MIN_POD_RESTART_BACKOFF = 0.1
#: The shortest orphan sweep interval but 0 (off): each sweep reads every row of the
#: cluster, and one failing (the database down) is tried again an interval later.
MIN_ORPHAN_SWEEP_INTERVAL = 60.0

DEFAULT_SANDBOX_RESOURCES: dict[str, dict[str, str]] = {
    "requests": {"cpu": "1", "memory": "2Gi", "ephemeral-storage": "5Gi"},
    "limits": {"cpu": "2", "memory": "10Gi", "ephemeral-storage": "20Gi"},
}


def default_state_dir() -> Path:
    """Where the embedded database and development key ring live unless configured."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "craft-operator"


#: The default bucket may have a legacy name (us-east-1 buckets made before 2018 may hold
#: capitals and '_', as may GCS's interoperable ones): refusing one that worked before would
#: stop an upgraded operator. A spec's bucket follows today's rules.
LEGACY_S3_BUCKET_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{1,253}[A-Za-z0-9]$"
#: A region botocore takes (its ``validate_region_name``: a host label, not only digits; an
#: empty one it takes, then makes an invalid endpoint of). It refuses any other only when a
#: client is made, long after the operator started.
S3_REGION_PATTERN = r"^(?![0-9]+$)(?!-)[A-Za-z0-9-]{1,63}(?<!-)$"
#: What a bad region is told, by the settings and by ``sync-user-library --region``.
S3_REGION_MESSAGE = (
    "must be an S3 region such as us-east-1: 1 to 63 letters, digits and '-', neither "
    "starting nor ending with '-', not only digits"
)


_DATABASE_URL_FORM = (
    "sqlite:///path or postgresql+psycopg://user:password@host:port/db, a password's @ "
    "and % percent-encoded (%40, %25)"
)


#: How SQLAlchemy splits a URL (its own pattern, ``sqlalchemy.engine.url``): the password
#: ends at the first "@", so one in it makes its tail the host or the database.
_URL_PARTS = re.compile(
    r"""
    (?P<scheme>[\w+]+)://
    (?:(?P<username>[^:/]*)(?::(?P<password>[^@]*))?@)?
    (?:(?:\[(?P<ipv6host>[^/?]+)\]|(?P<host>[^/:?]+))?(?::(?P<port>[^/?]*))?)?
    (?:/(?P<database>[^?]*))?
    (?:\?(?P<query>.*))?
    """,
    re.VERBOSE | re.DOTALL,
)
#: A host name or address, or several (comma separated, as libpq takes them).
_HOST_TEXT = re.compile(r"[A-Za-z0-9._%,-]+")


def check_database_url_text(url: str) -> None:
    """Raise ``ValueError`` (never quoting the URL: it holds a password) unless ``url`` is
    SQLite's or PostgreSQL's and its parts are where the credential store's parser will
    find them: a password's unencoded ``@`` makes its tail the host (or the database),
    which a driver's error would then name in every sandbox's status. Read as SQLAlchemy
    reads it, without loading it (the idle operator does not)."""
    if url != url.strip() or re.search(r"[\x00-\x1f\x7f]", url):
        # A Secret made with --from-file ends with a newline: the database "onyx\n" (or
        # the SQLite file "craft.db\n") does not exist, and every sandbox would say so.
        raise ValueError(
            "has whitespace at an end or a control character (a newline at the end of "
            "the Secret's value?): remove it"
        )
    parts = _URL_PARTS.fullmatch(url)
    scheme = parts.group("scheme") if parts else ""
    if parts is None or not re.fullmatch(r"(sqlite|postgresql)(\+\w+)?", scheme):
        raise ValueError(f"must be a database URL: {_DATABASE_URL_FORM}")
    if scheme.startswith("sqlite"):
        return
    host, port, database = parts.group("host"), parts.group("port"), parts.group("database")
    # A query item's value may hold an @ (application_name=craft@prod); its key, or an
    # item without "=", holds a password's tail (SQLAlchemy drops the item, or makes it an
    # option, and the host before it is the password's middle).
    query_keys = [item.partition("=")[0] for item in (parts.group("query") or "").split("&")]
    if (
        (host is not None and not _HOST_TEXT.fullmatch(host))
        or (port is not None and not re.fullmatch(r"[0-9]+", port))
        or "@" in (database or "")
        or any("@" in key for key in query_keys)
    ):
        raise ValueError(
            f"has a host, port or database name no parser reads right: {_DATABASE_URL_FORM}"
        )


def split_namespaces(values: Iterable[str]) -> list[str]:
    """Namespace names from comma lists (CRAFT_NAMESPACES, ``run -n``), blanks dropped."""
    return [part.strip() for value in values for part in value.split(",") if part.strip()]


def check_namespace_names(names: Iterable[str]) -> None:
    """Raise ``ValueError`` naming the first of ``names`` that is not a namespace name."""
    for namespace in names:
        if not re.fullmatch(DNS_LABEL_PATTERN, namespace) or len(namespace) > 63:
            raise ValueError(f"{namespace!r} is not a valid namespace name")


class SettingsError(Exception):
    """A setting has a bad value; the message names the environment variable."""


class Settings(BaseSettings):
    """All operator settings. Field ``foo_bar`` is read from ``CRAFT_FOO_BAR``."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        extra="ignore",
        frozen=True,
        validate_default=True,
    )

    namespaces: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Comma-separated namespaces to watch; empty watches all namespaces.",
    )
    sandbox_image: str = Field(
        default="craft-sandbox:0.1.0",
        description="Default sandbox image (with onyx-cli baked in) when spec.image is unset.",
        min_length=1,
    )
    server_url: str | None = Field(
        default=None,
        description="Default Onyx server URL (ONYX_SERVER_URL) when spec.serverURL is unset.",
        pattern=URL_PATTERN,
    )
    state_dir: Path = Field(
        default_factory=default_state_dir,
        description="Directory for the embedded SQLite database and the development key ring.",
    )
    database_url: SecretStr | None = Field(
        default=None,
        description=(
            "SQLAlchemy URL of the credentials database; default "
            "sqlite:///<CRAFT_STATE_DIR>/craft-operator.db. Use postgresql+psycopg://… "
            "for Onyx's Postgres."
        ),
    )
    encryption_keys: SecretStr | None = Field(
        default=None,
        description=(
            "Key ring for PATs at rest: comma-separated id:base64key entries, newest first. "
            "Unset: a development key ring is created in CRAFT_STATE_DIR, except in a pod, "
            "with Postgres or when peering, where the operator refuses to start."
        ),
    )
    encryption_keys_file: Path | None = Field(
        default=None,
        description=(
            "File holding the key ring in the CRAFT_ENCRYPTION_KEYS format (e.g. a mounted "
            "Secret); read when CRAFT_ENCRYPTION_KEYS is unset."
        ),
    )
    database_auto_migrate: bool = Field(
        default=True,
        description=(
            "Migrate the operator's credentials table at start (on SQLite, also create the "
            "PAT table); false: run 'craft-operator db upgrade' yourself."
        ),
    )
    credential_renewal_fraction: float = Field(
        default=0.2,
        gt=0,
        lt=1,
        description="Mint a new PAT when less than this share of its lifetime is left.",
    )
    credential_renewal_grace: Seconds = Field(
        default=300.0,
        gt=0,
        description=(
            "Seconds a renewed PAT's predecessor stays live at most, for the running pod to "
            "switch to the new one; revoked as soon as onyx-cli validates the new one there."
        ),
    )
    cluster_id: str | None = Field(
        default=None,
        description=(
            "This cluster's name in the credentials database: every credential row is keyed "
            "by it and the operator reads, renews, revokes and sweeps only rows of its own. "
            "Unset: 'embedded' on the SQLite database; required on Postgres (which other "
            "clusters' operators may share)."
        ),
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$",
    )
    onyx_multi_tenant: bool = Field(
        default=False,
        description=(
            "Multi-tenant Onyx (Onyx Cloud): each sandbox's PATs are read and written in the "
            "Postgres schema named by its spec.user.tenantId, where Onyx looks them up; the "
            "operator's own tables stay in the default schema. False: Onyx's tables are in "
            "the default schema, for every tenant."
        ),
    )
    orphan_sweep_interval: Seconds = Field(
        default=600.0,
        ge=0,
        description=(
            "Seconds between sweeps that revoke PATs whose CraftSandbox is gone (0: never; "
            "else at least 60)."
        ),
    )
    s3_bucket: str | None = Field(default=None, description="Default S3 bucket of user libraries.")
    s3_endpoint_url: str | None = Field(
        default=None,
        description="S3 endpoint (MinIO, moto); unset uses AWS.",
        pattern=URL_PATTERN,
    )
    s3_region: str | None = Field(default=None, description="S3 region, e.g. us-east-1.")
    library_max_file_bytes: int = Field(
        default=500_000_000,
        gt=0,
        description="Largest user-library file in bytes; a larger one fails the whole sync.",
    )
    library_max_total_bytes: int = Field(
        default=10_000_000_000,
        gt=0,
        description="Largest user library in bytes (all files); over it, nothing is synced.",
    )
    library_max_files: int = Field(
        default=10_000,
        gt=0,
        description=(
            "Most files in a user library; over it (or over ten times as many keys under its "
            "prefix), nothing is synced."
        ),
    )
    metrics_port: int = Field(
        default=9090, ge=0, le=65535, description="Port of the Prometheus metrics; 0 disables."
    )
    sandbox_resources: dict[str, dict[str, str]] = Field(
        default_factory=lambda: {
            key: dict(value) for key, value in DEFAULT_SANDBOX_RESOURCES.items()
        },
        description="Default sandbox container resources, JSON: {requests: {...}, limits: {...}}.",
    )
    idle_check_interval: Seconds = Field(
        default=60.0,
        ge=MIN_INTERVAL,
        description="Seconds between idle-timeout checks of each sandbox.",
    )
    workers: int = Field(default=16, ge=1, le=256, description="Sandboxes reconciled concurrently.")
    event_loop: Literal["uvloop", "asyncio"] = Field(
        default="uvloop",
        description="The event loop `run` works on: uvloop, or the standard library's asyncio.",
    )
    resync_interval: Seconds = Field(
        default=300.0,
        ge=MIN_INTERVAL,
        description="Seconds between revisits of a sandbox when nothing changes (catches PATs "
        "revoked out of band): each sandbox's PAT is read from the credentials database this "
        "often, and no more while nothing changes.",
    )
    pod_restart_backoff: Seconds = Field(
        default=10.0,
        ge=MIN_POD_RESTART_BACKOFF,
        description="Seconds before replacing a failed pod; doubles per failure, up to 300.",
    )
    operator_image: str = Field(
        default="craft-operator:0.1.0",
        description="Image of the operator, run by user-library sync Jobs (Job mode).",
        min_length=1,
    )
    library_s3_secret: str | None = Field(
        default=None,
        description=(
            "Job mode: name of the Secret, in each sandbox namespace, with the S3 credentials "
            "(AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY) for sync Jobs."
        ),
        pattern=DNS_SUBDOMAIN_PATTERN,
    )
    library_job_role_arn: str | None = Field(
        default=None,
        description=(
            "Job mode: IAM role the operator assumes (STS AssumeRole) for each sync Job, with "
            "a session policy limited to the library's bucket and prefix; the credentials go "
            "into a Secret owned by the Job. Unset: CRAFT_LIBRARY_S3_SECRET for every Job."
        ),
        pattern=r"^arn:[a-z0-9-]+:iam::[0-9]*:role/[A-Za-z0-9+=,.@/_-]+$",
    )
    library_sts_endpoint_url: str | None = Field(
        default=None,
        description=(
            "Job mode: STS endpoint for CRAFT_LIBRARY_JOB_ROLE_ARN; unset: "
            "CRAFT_S3_ENDPOINT_URL if set (MinIO serves STS there), else AWS."
        ),
        pattern=URL_PATTERN,
    )
    library_volume_size: str = Field(
        default="20Gi",
        description="Job mode: size of a library volume when spec.userLibrary.size is unset.",
        pattern=r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$",
    )
    library_sync_timeout: Seconds = Field(
        default=1800.0,
        gt=0,
        description="Seconds one user-library sync may take before it is abandoned and retried.",
    )
    library_exec_timeout: Seconds = Field(
        default=60.0,
        gt=0,
        description=(
            "Seconds each command of an Exec-mode library sync may take (the upload one more "
            "second per MB it carries); over it the command is abandoned (ExecTimedOut)."
        ),
    )
    library_sync_concurrency: int = Field(
        default=4,
        ge=1,
        le=256,
        description=(
            "Exec-mode library syncs run at once, in a pool apart from the reconcile workers."
        ),
    )
    library_manifest_max_bytes: int = Field(
        default=4 * 1024 * 1024,
        ge=1024,
        # Under the exec transport's 64 MiB cap on a command's output, which would otherwise
        # take any manifest over it for too large, whatever this says.
        le=32 * 1024 * 1024,
        description=(
            "Most bytes read of the library manifest in a pod (1 KiB to 32 MiB); a larger "
            "one is not trusted and the library is copied again in full "
            "(LibraryManifestUntrusted)."
        ),
    )
    max_pod_failures: int = Field(
        default=3,
        ge=1,
        description="Failed pods in a row before the sandbox is Failed and no longer replaced.",
    )
    provisioning_timeout: Seconds = Field(
        default=180.0,
        ge=MIN_INTERVAL,
        description="Seconds a pod may take to become ready.",
    )
    allow_unrestricted_egress: bool = Field(
        default=False,
        description=(
            "Start sandbox pods in a namespace where no NetworkPolicy restricts their egress "
            "(false: they wait for one, e.g. from manifests/sandbox-namespace)."
        ),
    )
    operator_namespace: str = Field(
        default="craft-system",
        description="Namespace the operator runs in (the doctor's advice names it).",
        pattern=DNS_LABEL_PATTERN,
    )
    peering_name: str | None = Field(
        default=None,
        description=(
            "Name of the ClusterKopfPeering through which two replicas form an "
            "active/standby pair; unset: standalone."
        ),
        max_length=253,
        pattern=DNS_SUBDOMAIN_PATTERN,
    )
    peering_priority: int = Field(
        default=0,
        description=(
            "Priority in the peering: the highest live replica works; with "
            "--priority-from-ordinal, the base the pod's ordinal is subtracted from."
        ),
    )
    peering_lifetime: int = Field(
        default=60,
        # kopf touches the keep-alive every lifetime - 5..10 s, but never more often than
        # every second: below 15 s the record may expire before the touch lands (the PATCH,
        # a slow API server, clocks apart between the replicas), and a standby reading it
        # then takes over while the active replica works on: two active replicas.
        ge=MIN_PEERING_LIFETIME,
        le=3600,
        description=(
            "Seconds a replica's peering keep-alive stays valid: how long a replica that "
            "died without a goodbye keeps its standby waiting."
        ),
    )
    skill_template_configmap: str | None = Field(
        default=None,
        description=(
            "ConfigMap with a custom company-search SKILL.md template, as namespace/name "
            "(key SKILL.md.j2). Unset: the built-in template."
        ),
    )

    @field_validator("namespaces", mode="before")
    @classmethod
    def _split_namespaces(cls, value: Any) -> Any:
        if isinstance(value, str):
            return split_namespaces([value])
        return value

    @field_validator("namespaces")
    @classmethod
    def _check_namespaces(cls, value: list[str]) -> list[str]:
        check_namespace_names(value)
        return value

    @field_validator("skill_template_configmap")
    @classmethod
    def _check_configmap_ref(cls, value: str | None) -> str | None:
        if value is None:
            return None
        namespace, _, name = value.partition("/")
        if not (
            re.fullmatch(DNS_LABEL_PATTERN, namespace)
            and len(namespace) <= 63
            and re.fullmatch(DNS_SUBDOMAIN_PATTERN, name)
            and len(name) <= 253
        ):
            raise ValueError("must be namespace/name of a ConfigMap, e.g. craft-system/skill")
        return value

    @field_validator("encryption_keys")
    @classmethod
    def _check_encryption_keys(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            from craft_operator.credentials.errors import KeyRingError
            from craft_operator.credentials.keyring import KeyRing

            try:
                KeyRing.parse(value)
            except KeyRingError as exc:  # the message names key ids, never key material
                raise ValueError(str(exc)) from None
        return value

    @field_validator("sandbox_resources")
    @classmethod
    def _check_resources(cls, value: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
        unknown = set(value) - {"requests", "limits"}
        if unknown:
            raise ValueError(f"only 'requests' and 'limits' are allowed, not {sorted(unknown)}")
        for part, quantities in value.items():
            for name, quantity in quantities.items():
                if not is_resource_name(name):
                    raise ValueError(
                        f"{part}: {name[:64]!r} is not a container resource (cpu, memory, "
                        "ephemeral-storage, hugepages-<size> or a domain-prefixed extended one)"
                    )
                check_quantity(quantity, f"{part}.{name}")
        requests, limits = value.get("requests", {}), value.get("limits", {})
        for name in sorted({*requests, *limits}):
            # Every sandbox's pod would be refused for it, each blamed on its own spec.
            problem = overcommit_problem(name, requests.get(name), limits.get(name))
            if problem is not None:
                raise ValueError(problem)
        return value

    @field_validator("sandbox_image", "operator_image")
    @classmethod
    def _check_image(cls, value: str) -> str:
        check_pattern(value, IMAGE_PATTERN, "must be an image reference without spaces")
        return value

    @field_validator("s3_bucket")
    @classmethod
    def _check_bucket(cls, value: str | None) -> str | None:
        message = (
            "must be an S3 bucket name: 3 to 255 letters, digits, '.', '_' and '-', "
            "starting and ending with a letter or digit"
        )
        return check_pattern(value, LEGACY_S3_BUCKET_PATTERN, message)

    @field_validator("s3_endpoint_url", "library_sts_endpoint_url")
    @classmethod
    def _check_endpoint(cls, value: str | None) -> str | None:
        # S3 and STS sign with AWS_* keys; a user:password@ here would only be quoted (in
        # doctor's line, botocore's errors, a sync Job's spec) and authenticate nothing.
        if value is not None and "@" in urlsplit(value).netloc:
            raise ValueError(
                "must not carry credentials (user:password@): S3 takes them from "
                "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or the pod's cloud role"
            )
        return value

    @field_validator("s3_region")
    @classmethod
    def _check_region(cls, value: str | None) -> str | None:
        if value == "":
            return None  # botocore takes an empty region as none (a templated blank)
        return check_pattern(value, S3_REGION_PATTERN, S3_REGION_MESSAGE)

    @field_validator("database_url")
    @classmethod
    def _check_database_url(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            check_database_url_text(value.get_secret_value())
        return value

    @field_validator("orphan_sweep_interval")
    @classmethod
    def _check_sweep_interval(cls, value: float) -> float:
        # A sweep every few milliseconds would read every row back to back, and, with the
        # database down, log its failure as often.
        if 0 < value < MIN_ORPHAN_SWEEP_INTERVAL:
            raise ValueError(f"must be 0 (no sweeps) or at least {MIN_ORPHAN_SWEEP_INTERVAL:.0f}")
        return value

    @field_validator("library_sync_timeout")
    @classmethod
    def _check_sync_timeout(cls, value: float, info: ValidationInfo) -> float:
        # Fields are validated in order: the role's ARN is read before the timeout.
        if info.data.get("library_job_role_arn") and value > MAX_SCOPED_SYNC_TIMEOUT:
            raise ValueError(
                f"must be at most {MAX_SCOPED_SYNC_TIMEOUT} with CRAFT_LIBRARY_JOB_ROLE_ARN "
                f"set: a sync Job's scoped S3 credentials last at most "
                f"{MAX_SCOPED_SESSION_SECONDS} s (STS's longest session), and must outlive "
                f"its deadline by {SCOPED_SESSION_SLACK_SECONDS} s"
            )
        return value

    @field_validator("library_volume_size")
    @classmethod
    def _check_volume_size(cls, value: str) -> str:
        check_quantity(value, "the size", minimum=1)
        return value

    @model_validator(mode="after")
    def _database_default(self) -> Settings:
        if self.database_url is None:
            url = f"sqlite:///{self.state_dir / 'craft-operator.db'}"
            object.__setattr__(self, "database_url", SecretStr(url))
        return self

    @property
    def skill_template_configmap_ref(self) -> tuple[str, str] | None:
        """The custom SKILL.md template's ConfigMap as (namespace, name), or None."""
        if self.skill_template_configmap is None:
            return None
        namespace, _, name = self.skill_template_configmap.partition("/")
        return namespace, name

    @property
    def effective_cluster_id(self) -> str | None:
        """CRAFT_CLUSTER_ID; unset, ``embedded`` on SQLite (a file no other cluster
        shares) and ``None`` on Postgres, where the operator refuses to start
        (:func:`craft_operator.credentials.factory.check_cluster_id_setting`)."""
        if self.cluster_id is not None:
            return self.cluster_id
        return EMBEDDED_CLUSTER_ID if self.database_url_value.startswith("sqlite") else None

    @property
    def database_url_value(self) -> str:
        """The database URL in clear (it may hold a password: never log it)."""
        assert self.database_url is not None
        return self.database_url.get_secret_value()


def _describe(error: ErrorDetails) -> str:
    field = str(error["loc"][0]) if error.get("loc") else ""
    variable = f"{ENV_PREFIX}{field.upper()}" if field else "settings"
    # The error's own message, never its input: the input may be a key or a password.
    message = str(error.get("msg", "invalid value"))
    message = message.removeprefix("Value error, ")
    return f"{variable}: {message}"


def load_settings(**overrides: Any) -> Settings:
    """Read the settings from the environment, raising :class:`SettingsError` on bad values."""
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        problems = "; ".join(_describe(error) for error in exc.errors(include_input=False))
        raise SettingsError(f"invalid operator settings: {problems}") from None
    except SourceParseError as exc:
        # pydantic-settings names the field, not the variable, and only for JSON values.
        field = str(exc).split('"')[1] if '"' in str(exc) else ""
        variable = f"{ENV_PREFIX}{field.upper()}" if field else "a CRAFT_* variable"
        raise SettingsError(f"invalid operator settings: {variable}: not valid JSON") from None
