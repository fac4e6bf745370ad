"""A shipped migration is never edited: a database it already migrated would never run
the edit (0002 was, and 0006 had to repair what that left behind). Change the schema in a
new revision; only a migration's docstring may change."""

from __future__ import annotations

import ast
import hashlib
import importlib
import inspect
import pkgutil

import pytest

import craft_operator.migrations.versions as versions

pytestmark = pytest.mark.unit

#: The code of every shipped revision (its docstring aside), by revision id.
SHIPPED = {
    "0001": "9a3708f944e5c407",
    "0002_job_sweep": "f68ddcb842694488",
    "0003_library_sync": "acc3a7ed887f3804",
    "0004_superseded_pat": "418c6ed953cd2c63",
    "0005_credential_sandbox_uid": "a3c5fbbd12cfac71",
    "0006_cluster_key_repair": "215db08aeb512422",
    "0007_sandbox_created_at": "415e2bab7145861c",
}


def code_digest(source: str) -> str:
    """The digest of a migration module's source after its docstring."""
    tree = ast.parse(source)
    first = tree.body[0]
    docstring = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
    start = first.end_lineno if docstring and first.end_lineno else 0
    code = "\n".join(source.splitlines()[start:]).strip()
    return hashlib.sha256(code.encode()).hexdigest()[:16]


def shipped_revisions() -> dict[str, str]:
    """Each migration module's revision id and code digest."""
    found = {}
    for module_info in pkgutil.iter_modules(versions.__path__):
        module = importlib.import_module(f"{versions.__name__}.{module_info.name}")
        found[module.revision] = code_digest(inspect.getsource(module))
    return found


def test_no_shipped_migration_has_been_edited() -> None:
    found = shipped_revisions()
    edited = {rev for rev, digest in SHIPPED.items() if found.get(rev) != digest}
    assert not edited, (
        f"migrations {sorted(edited)} changed: a database they already migrated never runs "
        "the change; put it in a new revision instead"
    )


def test_every_revision_is_listed_as_shipped() -> None:
    assert set(shipped_revisions()) == set(SHIPPED), "add a new revision's digest to SHIPPED"
