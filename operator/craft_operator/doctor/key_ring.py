"""``doctor``'s key ring check: the ring loads, and opens every token this cluster stores.

A missing development key ring is reported, never created; rings are shown by key id.
"""

from __future__ import annotations

from sqlalchemy import Engine

from craft_operator.config import Settings
from craft_operator.credentials.errors import CredentialsError, KeyRingError
from craft_operator.credentials.factory import load_key_ring
from craft_operator.credentials.keyring import DEV_KEY_RING_FILE, KeyRing, key_ring_from_file
from craft_operator.credentials.store import CredentialStore
from craft_operator.doctor.results import CheckResult, fail, ok, warn

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
