"""``doctor``'s key ring check: the ring loads, has every key this cluster's stored tokens
name, and opens a sample of each key's tokens (a bounded number per key id).

A missing development key ring is reported, never created; rings are shown by key id.
"""

from __future__ import annotations

from sqlalchemy import Engine, inspect
from sqlalchemy.exc import SQLAlchemyError

from craft_operator.config import Settings
from craft_operator.credentials.errors import CredentialsError, KeyRingError, SchemaMissingError
from craft_operator.credentials.factory import check_key_ring_setting, load_key_ring
from craft_operator.credentials.keyring import DEV_KEY_RING_FILE, KeyRing, key_ring_from_file
from craft_operator.credentials.rotation import KeyUsage
from craft_operator.credentials.store import CredentialStore
from craft_operator.credentials.tables import CREDENTIAL_TABLE
from craft_operator.doctor.paths import WRITABLE_FIX, creation_problem
from craft_operator.doctor.results import CheckResult, Status, fail, ok, warn

#: How many tokens per key id doctor opens to prove the ring's key of that id sealed them.
SAMPLE_PER_KEY = 3

_KEYS_FIX = (
    "set CRAFT_ENCRYPTION_KEYS (or CRAFT_ENCRYPTION_KEYS_FILE) to id:base64key entries, "
    "newest first; make one with: craft-operator keys generate"
)


def _describe_ring(ring: KeyRing) -> str:
    return f"{len(ring.key_ids)} key(s), encrypting with {ring.current_key_id!r}"


def check_key_ring(
    settings: Settings, engine: Engine | None = None, *, peering: bool = False
) -> CheckResult:
    """Load the key ring; with a migrated ``engine``, check it has the key of every token
    this cluster stores and opens a sample of each key's tokens. Without one where ``run``
    refuses the development ring (in a pod, on Postgres, peered): a failure, as ``run``
    then stops."""
    name = "key ring"
    if settings.encryption_keys is None and settings.encryption_keys_file is None:
        try:
            check_key_ring_setting(settings, peering=peering)
        except KeyRingError as exc:
            return fail(name, str(exc), _KEYS_FIX)
        path = settings.state_dir / DEV_KEY_RING_FILE
        production = "for production, " + _KEYS_FIX[0].lower() + _KEYS_FIX[1:]
        if not path.exists():
            problem = creation_problem(path)
            if problem is not None:
                return fail(
                    name,
                    f"no CRAFT_ENCRYPTION_KEYS, and the development key ring {path} cannot be "
                    f"created: {problem}",
                    f"{WRITABLE_FIX}; for production, {_KEYS_FIX}",
                )
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
    """``result``, judged against the tokens stored: this cluster's must all use keys the
    ring has, and a sample of each key's must open with it (key ids alone prove nothing:
    another key may carry the same id)."""
    if engine is None or cluster_id is None:
        return result
    store = CredentialStore(engine, ring, cluster_id=cluster_id)
    try:
        usage = store.key_usage(sample_per_key=SAMPLE_PER_KEY)
    except SchemaMissingError as exc:  # a schema behind, which the operator migrates at start
        if not _stores_tokens(engine):
            return result  # not migrated yet: no token is stored
        return warn(
            result.name,
            f"{result.detail}; the stored tokens were not checked against it: {exc}",
            "run craft-operator doctor again once the schema is migrated",
        )
    except CredentialsError as exc:
        return fail(result.name, f"cannot read the stored tokens: {exc}", "check the database")
    finally:
        store.close()
    failed = _missing_keys(ring, usage) + _wrong_keys(usage)
    if failed:
        return fail(
            result.name, "; ".join(detail for detail, _ in failed), "; ".join(f for _, f in failed)
        )
    return _noted(result, ring, usage)


def _stores_tokens(engine: Engine) -> bool:
    """Whether the database has the operator's table of tokens (a new one has none yet)."""
    try:
        return inspect(engine).has_table(CREDENTIAL_TABLE)
    except SQLAlchemyError:
        return True  # unknown: say the tokens were not checked


def _some(names: list[str], limit: int = 5) -> str:
    """The first ``limit`` names, and how many more there are."""
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _missing_keys(ring: KeyRing, usage: KeyUsage) -> list[tuple[str, str]]:
    """This cluster's tokens under key ids the ring lacks: (finding, fix), or none."""
    missing = sorted(set(usage.by_key) - set(ring.key_ids))
    if not missing:
        return []
    count = sum(usage.by_key[key] for key in missing)
    return [
        (
            f"{count} stored token(s) are encrypted under key(s) {', '.join(missing)}, "
            "which the key ring lacks",
            "add those keys back to CRAFT_ENCRYPTION_KEYS (after the current one) and run: "
            "craft-operator keys rotate",
        )
    ]


def _wrong_keys(usage: KeyUsage) -> list[tuple[str, str]]:
    """Sampled tokens that did not open under the ring's key of their id: (finding, fix)."""
    if not usage.undecryptable:
        return []
    keys = sorted({key for _, key in usage.undecryptable})
    sandboxes = [f"{sandbox} (key {key!r})" for sandbox, key in usage.undecryptable]
    return [
        (
            f"{len(usage.undecryptable)} of {usage.sampled} sampled stored token(s) do not "
            f"open under the ring's key of their id: {_some(sandboxes)}",
            f"if the ring's key(s) {', '.join(repr(key) for key in keys)} are not the ones "
            "that sealed them (another key of the same id), put the originals back: the "
            "operator revokes and replaces each PAT whose token does not open",
        )
    ]


def _noted(result: CheckResult, ring: KeyRing, usage: KeyUsage) -> CheckResult:
    """``result`` with what needs a look but fails nothing: tokens under older keys, rows
    without a cluster id under the ring's older keys, unreadable envelope headers."""
    detail, status, fixes = result.detail, result.status, [result.fix] if result.fix else []
    old = sorted(key for key in usage.by_key if key != ring.current_key_id)
    if old:
        count = sum(usage.by_key[key] for key in old)
        detail += f"; {count} stored token(s) under older key(s) {', '.join(old)}"
        fixes = fixes or ["run: craft-operator keys rotate, and drop old keys only as it says"]
    if usage.unclaimed_by_key:
        counts = ", ".join(f"{key}: {n}" for key, n in sorted(usage.unclaimed_by_key.items()))
        detail += f"; rows without a cluster id (never rotated) by key: {counts}"
        held = sorted(key for key in usage.unclaimed_by_key if key in ring.key_ids[1:])
        if held:
            detail += f"; older key(s) {', '.join(held)} cannot be dropped while such rows use them"
            status = Status.WARN if status is Status.OK else status
            fixes.append("adopt them: craft-operator credentials adopt, then keys rotate")
    if usage.malformed:
        detail += (
            f"; {len(usage.malformed)} row(s) have an unreadable envelope header: "
            f"{_some(list(usage.malformed))}"
        )
        status = Status.WARN if status is Status.OK else status
        fixes.append(
            "the operator replaces this cluster's at their next reconcile; "
            "or: craft-operator credentials revoke NAMESPACE/NAME"
        )
    return CheckResult(result.name, status, detail, "; ".join(fixes))
