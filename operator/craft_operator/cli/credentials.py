"""``craft-operator credentials``: inspect and revoke a sandbox's PAT (for on-call staff)."""

from __future__ import annotations

import json

import click

from craft_operator.cli._store import (
    fail,
    opened_store,
    quiet_logging,
    settings_or_fail,
    split_sandbox,
)
from craft_operator.credentials import CredentialInfo
from craft_operator.credentials.orphans import adopt_rows


def _as_dict(info: CredentialInfo) -> dict[str, str | int]:
    return {
        "sandbox": f"{info.namespace}/{info.name}",
        "sandboxUID": info.sandbox_uid,
        "userID": info.user_id,
        "tenantID": info.tenant_id,
        "patID": info.pat_id,
        "patState": info.pat_state.value,
        "tokenDisplay": info.token_display,
        "createdAt": info.created_at.isoformat(),
        "expiresAt": info.expires_at.isoformat(),
        "keyID": info.key_id,
    }


@click.group()
def credentials() -> None:
    """Show or revoke the Onyx PAT of a sandbox. The token itself is never printed."""


@credentials.command()
@click.argument("sandbox", metavar="NAMESPACE/NAME", callback=split_sandbox)
@click.option(
    "-o", "--output", type=click.Choice(["text", "json"]), default="text", show_default=True
)
def show(sandbox: tuple[str, str], output: str) -> None:
    """Print the PAT's display form, id, state, creation and expiry."""
    quiet_logging()
    namespace, name = sandbox
    with opened_store(settings_or_fail()) as store:
        info = store.show(namespace, name)
    if info is None:
        fail(f"no credential is stored for sandbox {namespace}/{name}")
    fields = _as_dict(info)
    if output == "json":
        click.echo(json.dumps(fields, indent=2))
        return
    width = max(len(key) for key in fields) + 1
    for key, value in fields.items():
        click.echo(f"{key + ':':<{width}} {value}")


@credentials.command()
@click.argument("sandbox", metavar="NAMESPACE/NAME", callback=split_sandbox)
def revoke(sandbox: tuple[str, str]) -> None:
    """Revoke the sandbox's PAT now (incident response).

    The PAT stops working at once. The operator mints a fresh PAT at its next reconcile of
    the sandbox and replaces the pod's credentials.
    """
    quiet_logging()
    namespace, name = sandbox
    with opened_store(settings_or_fail()) as store:
        info = store.revoke_named(namespace, name)
    if info is None:
        fail(f"no credential is stored for sandbox {namespace}/{name}; nothing was revoked")
    click.echo(f"revoked PAT {info.pat_id} ({info.token_display}) of sandbox {namespace}/{name}")


@credentials.command()
@click.option(
    "--namespace",
    "namespaces",
    multiple=True,
    metavar="NAMESPACE",
    help="Only rows of sandboxes in this namespace (repeat); default: every row.",
)
def adopt(namespaces: tuple[str, ...]) -> None:
    """Mark stored credentials without a cluster id as this cluster's (CRAFT_CLUSTER_ID).

    Rows written before the operator recorded cluster ids are never revoked by the orphan
    sweep. Adopt only rows this cluster's operator wrote: once adopted, the sweep revokes
    the PAT of any whose CraftSandbox does not exist in this cluster.
    """
    quiet_logging()
    settings = settings_or_fail()
    cluster_id = settings.effective_cluster_id
    if cluster_id is None:
        fail("set CRAFT_CLUSTER_ID to the id this cluster's operator uses", code=2)
    with opened_store(settings) as store:
        adopted = adopt_rows(store, cluster_id, namespaces)
    click.echo(f"adopted {adopted} credential rows as cluster {cluster_id!r}")
