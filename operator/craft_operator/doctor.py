"""``craft-operator doctor``'s checks: settings, database, key ring, S3 and the Kubernetes API.

Each check returns :class:`CheckResult` lines: what is fine, or what is wrong and how to fix
it. Checks only read: a missing SQLite file or development key ring is reported, never
created, and nothing is migrated. No result ever holds a secret: database URLs are shown
with the password masked, key rings by key id, S3 and Kubernetes by endpoint only.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import asdict, dataclass
from enum import StrEnum
from pathlib import Path

import kopf
from alembic.script import ScriptDirectory
from alembic.util import CommandError as AlembicCommandError
from botocore.exceptions import ClientError
from sqlalchemy import Engine, inspect, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from craft_operator.access import access_fix, denied_access, describe_denied
from craft_operator.api import models
from craft_operator.config import Settings, SettingsError, load_settings
from craft_operator.credentials.db import (
    alembic_config,
    check_onyx_tables,
    check_schema,
    create_credentials_engine,
    current_revision,
    describe_url,
    head_revision,
    is_onyx_mode,
    translated_errors,
)
from craft_operator.credentials.errors import (
    ClusterIdMissingError,
    CredentialsError,
    KeyRingError,
    SchemaMissingError,
)
from craft_operator.credentials.factory import check_cluster_id_setting, load_key_ring
from craft_operator.credentials.keyring import DEV_KEY_RING_FILE, KeyRing, key_ring_from_file
from craft_operator.credentials.store import CredentialStore
from craft_operator.credentials.tables import CREDENTIAL_TABLE, PAT_TABLE
from craft_operator.kube.client import ApiError, KubeClient
from craft_operator.kube.connection import (
    ClusterUnreachableError,
    check_reachable,
    discover_connection,
)
from craft_operator.library.errors import S3BucketNotFoundError, S3Error
from craft_operator.library.s3 import classify_s3_error, make_s3_client
from craft_operator.permissions import access_requests

DB_CONNECT_TIMEOUT_S = 10
KUBE_TIMEOUT_S = 10.0


class Status(StrEnum):
    """The outcome of one check; only ``fail`` makes ``doctor`` exit non-zero."""

    OK = "ok"
    WARN = "warn"
    FAIL = "fail"


@dataclass(frozen=True)
class CheckResult:
    """One line of the report: ``detail`` says what was found, ``fix`` what to do about it."""

    name: str
    status: Status
    detail: str
    fix: str = ""

    def as_dict(self) -> dict[str, str]:
        """The result as plain JSON-able strings."""
        return {key: str(value) for key, value in asdict(self).items()}


def ok(name: str, detail: str) -> CheckResult:
    """A passed check."""
    return CheckResult(name, Status.OK, detail)


def warn(name: str, detail: str, fix: str = "") -> CheckResult:
    """A check that passed with something to look at (does not fail ``doctor``)."""
    return CheckResult(name, Status.WARN, detail, fix)


def fail(name: str, detail: str, fix: str) -> CheckResult:
    """A failed check."""
    return CheckResult(name, Status.FAIL, detail, fix)


# -- settings ------------------------------------------------------------------------------------


def check_settings() -> tuple[list[CheckResult], Settings | None]:
    """Load the settings as the operator does; warn about defaults that production needs set."""
    try:
        settings = load_settings()
    except SettingsError as exc:
        return [fail("settings", str(exc), "correct the CRAFT_* variable named above")], None
    watched = ", ".join(settings.namespaces) or "all namespaces"
    metrics = f"port {settings.metrics_port}" if settings.metrics_port else "disabled"
    results = [ok("settings", f"loaded; watching {watched}; metrics {metrics}")]
    try:
        check_cluster_id_setting(settings)
    except ClusterIdMissingError as exc:
        results.append(
            fail("cluster id", str(exc), "set CRAFT_CLUSTER_ID in the operator's settings")
        )
    if settings.server_url is None:
        results.append(
            warn(
                "server URL",
                "no CRAFT_SERVER_URL: every CraftSandbox must set spec.serverURL",
                "set CRAFT_SERVER_URL to the Onyx API URL the sandboxes use",
            )
        )
    return results, settings


# -- database ------------------------------------------------------------------------------------


def _sqlite_file(url: str) -> Path | None:
    try:
        parsed = make_url(url)
    except ArgumentError:
        return None  # create_credentials_engine explains
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database).expanduser()


def _with_connect_timeout(url: str) -> str:
    try:
        parsed = make_url(url)
    except ArgumentError:
        return url  # create_credentials_engine explains
    if parsed.get_backend_name() == "postgresql" and "connect_timeout" not in parsed.query:
        parsed = parsed.update_query_dict({"connect_timeout": str(DB_CONNECT_TIMEOUT_S)})
    return parsed.render_as_string(hide_password=False)


def check_database(settings: Settings) -> tuple[list[CheckResult], Engine | None]:
    """Connect to CRAFT_DATABASE_URL and check the schema; the engine if the schema is current.

    The caller disposes of the returned engine.
    """
    url = settings.database_url_value
    shown = describe_url(url)
    sqlite_file = _sqlite_file(url)
    if sqlite_file is not None and not sqlite_file.exists():
        detail = f"{shown} does not exist yet"
        if settings.database_auto_migrate:
            return [ok("database", f"{detail}; the operator creates it at start")], None
        return [
            fail(
                "database",
                f"{detail} and CRAFT_DATABASE_AUTO_MIGRATE is false",
                "run: craft-operator db upgrade",
            )
        ], None
    try:
        engine = create_credentials_engine(_with_connect_timeout(url))
    except CredentialsError as exc:
        return [fail("database", str(exc), "correct CRAFT_DATABASE_URL")], None
    try:
        with translated_errors(shown), engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except CredentialsError as exc:
        engine.dispose()
        return [
            fail(
                "database",
                str(exc),
                "check host, port, database name, user and password in CRAFT_DATABASE_URL, "
                "and that the database accepts connections from here",
            )
        ], None
    mode = "Onyx mode, PostgreSQL" if is_onyx_mode(engine) else "embedded SQLite"
    results = [ok("database", f"{shown} ({mode})")]
    schema = _check_schema(engine, settings)
    results.append(schema)
    if schema.status is Status.OK:
        return results, engine
    engine.dispose()
    return results, None


def _known_revisions(engine: Engine) -> set[str]:
    with engine.connect() as connection:
        scripts = ScriptDirectory.from_config(alembic_config(connection))
        return {script.revision for script in scripts.walk_revisions()}


def _check_schema(engine: Engine, settings: Settings) -> CheckResult:
    name = "database schema"
    try:
        check_schema(engine)
    except SchemaMissingError as exc:
        return _diagnose_schema(engine, settings, str(exc))
    except CredentialsError as exc:
        return fail(name, str(exc), "check the database; run: craft-operator db upgrade")
    return ok(name, f"{CREDENTIAL_TABLE} at revision {head_revision()}, the newest")


def _diagnose_schema(engine: Engine, settings: Settings, message: str) -> CheckResult:
    name = "database schema"
    try:
        with translated_errors("checking the credentials database"), engine.connect() as c:
            if is_onyx_mode(engine):
                try:
                    check_onyx_tables(c)
                except SchemaMissingError as exc:
                    return fail(
                        name,
                        str(exc),
                        "point CRAFT_DATABASE_URL at Onyx's database once Onyx's migrations ran",
                    )
            revision = current_revision(c)
            has_pat_table = inspect(c).has_table(PAT_TABLE)
        known = _known_revisions(engine)
    except (CredentialsError, AlembicCommandError):
        return fail(name, message, "run: craft-operator db upgrade")
    head = head_revision()
    if revision is not None and revision not in known:
        return fail(
            name,
            f"{CREDENTIAL_TABLE} is at revision {revision}, which this operator does not know "
            f"(its newest is {head}): a newer operator migrated it",
            "run the newer operator version (a downgrade is not supported)",
        )
    what = f"{CREDENTIAL_TABLE} is at revision {revision or 'none'}, this operator needs {head}"
    if not is_onyx_mode(engine) and not has_pat_table:
        what = f"the embedded database has no {PAT_TABLE} table yet; {what}"
    if settings.database_auto_migrate:
        return warn(
            name,
            f"{what}; the operator migrates it at start (CRAFT_DATABASE_AUTO_MIGRATE)",
            "nothing to do, or run: craft-operator db upgrade",
        )
    return fail(name, what, "run: craft-operator db upgrade (CRAFT_DATABASE_AUTO_MIGRATE is off)")


# -- key ring ------------------------------------------------------------------------------------

_KEYS_FIX = (
    "set CRAFT_ENCRYPTION_KEYS (or CRAFT_ENCRYPTION_KEYS_FILE) to id:base64key entries, "
    "newest first; make one with: craft-operator keys generate"
)


def _describe_ring(ring: KeyRing) -> str:
    return f"{len(ring.key_ids)} key(s), encrypting with {ring.current_key_id!r}"


def check_key_ring(settings: Settings, engine: Engine | None = None) -> CheckResult:
    """Load the key ring; with a migrated ``engine``, check it decrypts every stored token."""
    name = "key ring"
    if settings.encryption_keys is None and settings.encryption_keys_file is None:
        path = settings.state_dir / DEV_KEY_RING_FILE
        production = "for production, " + _KEYS_FIX[0].lower() + _KEYS_FIX[1:]
        if not path.exists():
            return warn(
                name,
                f"no CRAFT_ENCRYPTION_KEYS: the operator creates a development key ring at {path}",
                production,
            )
        try:
            ring = key_ring_from_file(path)
        except KeyRingError as exc:
            return fail(name, str(exc), f"delete {path} (tokens under it are lost) or {_KEYS_FIX}")
        return _coverage(
            warn(name, f"using the development key ring {path}", production),
            ring,
            engine,
            settings.effective_cluster_id,
        )
    source = (
        "CRAFT_ENCRYPTION_KEYS"
        if settings.encryption_keys is not None
        else str(settings.encryption_keys_file)
    )
    try:
        ring = load_key_ring(settings)
    except KeyRingError as exc:
        return fail(name, str(exc), _KEYS_FIX)
    return _coverage(
        ok(name, f"{_describe_ring(ring)} (from {source})"),
        ring,
        engine,
        settings.effective_cluster_id,
    )


def _coverage(
    result: CheckResult, ring: KeyRing, engine: Engine | None, cluster_id: str | None
) -> CheckResult:
    """``result``, or a failure if this cluster's stored tokens use keys the ring lacks."""
    if engine is None or cluster_id is None:
        return result
    store = CredentialStore(engine, ring, cluster_id=cluster_id)
    try:
        in_use = store.key_ids_in_use()
    except CredentialsError as exc:
        return fail(result.name, f"cannot read the stored tokens: {exc}", "check the database")
    finally:
        store.close()
    missing = sorted(set(in_use) - set(ring.key_ids))
    if missing:
        count = sum(in_use[key] for key in missing)
        return fail(
            result.name,
            f"{count} stored token(s) are encrypted under key(s) {', '.join(missing)}, "
            "which the key ring lacks",
            "add those keys back to CRAFT_ENCRYPTION_KEYS (after the current one) and run: "
            "craft-operator keys rotate",
        )
    old = sorted(key for key in in_use if key != ring.current_key_id)
    if old:
        count = sum(in_use[key] for key in old)
        detail = f"{result.detail}; {count} stored token(s) under older key(s) {', '.join(old)}"
        fix = result.fix or "run: craft-operator keys rotate, then drop the old keys"
        return CheckResult(result.name, result.status, detail, fix)
    return result


# -- S3 ------------------------------------------------------------------------------------------


def _head_bucket_error(exc: Exception, bucket: str) -> S3Error:
    # HEAD answers carry no error body: a missing bucket is a bare 404, not NoSuchBucket.
    if isinstance(exc, ClientError):
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if status == 404:
            return S3BucketNotFoundError(f"S3 bucket {bucket!r} does not exist")
    return classify_s3_error(exc, bucket=bucket)


def check_s3(settings: Settings) -> CheckResult:
    """HEAD the default bucket (CRAFT_S3_BUCKET) with the operator's S3 credentials."""
    name = "S3"
    bucket = settings.s3_bucket
    if not bucket:
        return warn(
            name,
            "no CRAFT_S3_BUCKET: user libraries need spec.userLibrary.bucket",
            "set CRAFT_S3_BUCKET to the bucket of Onyx's user files",
        )
    where = settings.s3_endpoint_url or "AWS"
    client = make_s3_client(
        endpoint_url=settings.s3_endpoint_url,
        region=settings.s3_region,
        max_attempts=1,
        read_timeout=KUBE_TIMEOUT_S,
    )
    try:
        client.head_bucket(Bucket=bucket)
    except Exception as exc:  # botocore raises many types; classify_s3_error sorts them
        error = _head_bucket_error(exc, bucket)
        fixes = {
            "S3BucketNotFound": "create the bucket, or correct CRAFT_S3_BUCKET",
            "S3AccessDenied": "give the operator's S3 identity (AWS_* variables or the pod's "
            "cloud role) s3:ListBucket and s3:GetObject on the bucket",
            "S3Unavailable": "check CRAFT_S3_ENDPOINT_URL, CRAFT_S3_REGION and the network "
            "path to S3",
        }
        return fail(
            name, f"{error.message} ({where})", fixes.get(error.reason, fixes["S3Unavailable"])
        )
    finally:
        client.close()
    return ok(name, f"bucket {bucket!r} is reachable ({where})")


# -- Kubernetes ----------------------------------------------------------------------------------


async def check_kubernetes(
    settings: Settings,
    *,
    connect: Callable[[], kopf.ConnectionInfo] = discover_connection,
) -> list[CheckResult]:
    """Reach the API server, find the CraftSandbox API, and check every permission the
    operator's ClusterRole grants with SelfSubjectAccessReviews (as the identity in use)."""
    try:
        info = await asyncio.to_thread(connect)
        version = await check_reachable(info, limit=KUBE_TIMEOUT_S)
    except ClusterUnreachableError as exc:
        return [
            fail(
                "Kubernetes API",
                str(exc),
                "run doctor in the operator's pod, or point KUBECONFIG (the current context) "
                "at the cluster",
            )
        ]
    server = f"{info.server} (Kubernetes {version.get('gitVersion', 'version unknown')})"
    results = [ok("Kubernetes API", server)]
    kube = KubeClient(request_timeout=KUBE_TIMEOUT_S)
    kube.configure(info)
    try:
        results.append(await _check_crd(kube))
        results.append(await _check_permissions(kube, settings))
    finally:
        await kube.close()
    return results


async def _check_crd(kube: KubeClient) -> CheckResult:
    name = "CraftSandbox API"
    fix = "install the CRD: kubectl apply -f crds/ (kubectl apply -k manifests/base does too)"
    try:
        answer = await kube.request("GET", f"/apis/{models.API_VERSION}")
    except ApiError as exc:
        if exc.status == 404:
            return fail(name, f"the API server does not serve {models.API_VERSION}", fix)
        return fail(name, f"cannot read API discovery: {exc}", "check the API server")
    served = {item.get("name") for item in answer.get("resources") or []}
    missing = {models.PLURAL, f"{models.PLURAL}/status"} - served
    if missing:
        what = f"{models.API_VERSION} lacks {', '.join(sorted(missing))}: an old CRD"
        return fail(name, what, fix)
    return ok(name, f"{models.PLURAL}.{models.GROUP} is served at {models.API_VERSION}")


async def _check_permissions(kube: KubeClient, settings: Settings) -> CheckResult:
    name = "API permissions"
    namespaces = settings.namespaces
    template = settings.skill_template_configmap_ref
    requests = access_requests(
        namespaces, template_namespace=template[0] if template is not None else None
    )
    try:
        denied = await denied_access(kube, requests)
    except ApiError as exc:
        return fail(
            name,
            f"cannot ask the API server what is allowed (SelfSubjectAccessReview): {exc}",
            "allow creating selfsubjectaccessreviews (system:basic-user grants it by default)",
        )
    if denied:
        missing = describe_denied(denied, limit=len(denied))
        return fail(
            name, f"{len(denied)} missing: {missing}", access_fix(denied, served=namespaces)
        )
    scope = f"in {', '.join(namespaces)}" if namespaces else "cluster-wide"
    return ok(name, f"all {len(requests)} grants the operator needs are allowed ({scope})")


# -- all together --------------------------------------------------------------------------------


def run_checks(
    *,
    kubernetes: bool = True,
    connect: Callable[[], kopf.ConnectionInfo] = discover_connection,
) -> list[CheckResult]:
    """Every check, in order; later checks are skipped when the settings cannot be loaded."""
    results, settings = check_settings()
    if settings is None:
        return results
    database, engine = check_database(settings)
    results.extend(database)
    try:
        results.append(check_key_ring(settings, engine))
    finally:
        if engine is not None:
            engine.dispose()
    results.append(check_s3(settings))
    if kubernetes:
        results.extend(asyncio.run(check_kubernetes(settings, connect=connect)))
    return results
