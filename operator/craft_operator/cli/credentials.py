"""``craft-operator credentials``: inspect and revoke a sandbox's PAT (for on-call staff)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable

import click

from craft_operator.api.models import ANNOTATION_PAT_REVOKED
from craft_operator.cli._store import (
    fail,
    opened_store,
    quiet_logging,
    settings_or_fail,
    split_sandbox,
)
from craft_operator.credentials import CredentialInfo, Forgotten
from craft_operator.credentials.orphans import StoredCredential, adopt_rows, unclaimed_rows
from craft_operator.kube.client import SANDBOXES, ApiError, KubeClient, NotFoundError
from craft_operator.kube.connection import ClusterUnreachableError, discover_connection


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

    The PAT stops working at once. Then the CraftSandbox is annotated
    (craft.onyx.app/pat-revoked, through the current kube context) so that the operator
    mints a fresh PAT and delivers it to the pod now; without a cluster to ask, it does at
    the sandbox's next revisit (within CRAFT_RESYNC_INTERVAL). A PAT no longer in Onyx
    (deleted there) is not revoked: the credential is forgotten, and a fresh PAT asked for
    all the same.
    """
    quiet_logging()
    namespace, name = sandbox
    with opened_store(settings_or_fail()) as store:
        info = store.revoke_named(namespace, name)
    if info is None:
        fail(f"no credential is stored for sandbox {namespace}/{name}; nothing was revoked")
    click.echo(_what_was_done(info))
    if info.forgotten is Forgotten.TENANT_GONE:
        return
    try:
        asyncio.run(ask_for_a_fresh_pat(namespace, name, info.pat_id))
    except NotFoundError:
        click.echo(f"its CraftSandbox {namespace}/{name} does not exist in this cluster")
    except (ClusterUnreachableError, ApiError, ValueError) as exc:
        # ValueError: aiohttp's for a connection it cannot use; the PAT is revoked all the same.
        click.echo(
            f"could not ask the operator for a fresh PAT now ({exc}): it mints one at the "
            "sandbox's next revisit (within CRAFT_RESYNC_INTERVAL)",
            err=True,
        )
    else:
        click.echo(
            f"asked the operator for a fresh PAT now ({ANNOTATION_PAT_REVOKED}={info.pat_id} "
            "on the CraftSandbox)"
        )


def _what_was_done(info: CredentialInfo) -> str:
    """What ``credentials revoke`` did to the sandbox's credential, for the operator."""
    sandbox = f"sandbox {info.namespace}/{info.name}"
    if info.forgotten is Forgotten.TENANT_GONE:
        return (
            f"forgot the credential of {sandbox}: its Onyx tenant's schema is gone, and "
            f"PAT {info.pat_id} with it"
        )
    if info.forgotten is Forgotten.PAT_NOT_IN_ONYX:
        return (
            f"forgot the credential of {sandbox}; nothing was revoked: its PAT {info.pat_id} "
            f"({info.token_display}) is not in Onyx (deleted, or its schema recreated or "
            "restored: a PAT of that id now is another's, left alone)"
        )
    return f"revoked PAT {info.pat_id} ({info.token_display}) of {sandbox}"


async def ask_for_a_fresh_pat(namespace: str, name: str, pat_id: int) -> None:
    """Annotate the CraftSandbox with the revoked PAT's id, so that the operator checks its
    PAT at once instead of at its next recheck (the current kubeconfig context, or the
    pod's service account).

    Raises :class:`ClusterUnreachableError` or :class:`ApiError` (:class:`NotFoundError`:
    no such CraftSandbox), or aiohttp's :class:`ValueError` for a connection it cannot use.
    """
    kube = KubeClient(request_timeout=30.0)
    kube.configure(discover_connection())
    try:
        patch = {"metadata": {"annotations": {ANNOTATION_PAT_REVOKED: str(pat_id)}}}
        await kube.patch(SANDBOXES, namespace, name, patch)
    finally:
        await kube.close()


async def live_sandbox_uids(keys: Iterable[tuple[str, str]]) -> dict[tuple[str, str], str]:
    """The uid of each named CraftSandbox that exists in this cluster (the current
    kubeconfig context, or the pod's service account).

    Raises :class:`ClusterUnreachableError` or :class:`ApiError` (other than not found), or
    aiohttp's :class:`ValueError` for a connection it cannot use.
    """
    kube = KubeClient(request_timeout=30.0)
    kube.configure(discover_connection())
    uids: dict[tuple[str, str], str] = {}
    try:
        for namespace, name in keys:
            try:
                live = await kube.get(SANDBOXES, namespace, name)
            except NotFoundError:
                continue
            uid = live.get("metadata", {}).get("uid")
            if isinstance(uid, str):
                uids[(namespace, name)] = uid
    finally:
        await kube.close()
    return uids


@credentials.command()
@click.option(
    "--namespace",
    "namespaces",
    multiple=True,
    metavar="NAMESPACE",
    help="Only rows of sandboxes in this namespace (repeat); default: every row.",
)
@click.option("--dry-run", is_flag=True, help="List what would be adopted; change nothing.")
def adopt(namespaces: tuple[str, ...], dry_run: bool) -> None:
    """Claim this cluster's stored credentials from before cluster ids (CRAFT_CLUSTER_ID).

    Rows written before the operator recorded cluster ids belong to no cluster, and the
    orphan sweep never revokes them. A row is adopted only if its CraftSandbox exists in
    this cluster (the current kubeconfig context) with the uid the row records: a row of
    another cluster sharing the database, or of a sandbox deleted since, is left alone.
    """
    quiet_logging()
    settings = settings_or_fail()
    with opened_store(settings) as store:
        rows = unclaimed_rows(store, namespaces)
        try:
            uids = asyncio.run(live_sandbox_uids((row.namespace, row.name) for row in rows))
        except (ClusterUnreachableError, ApiError, ValueError) as exc:  # ValueError: aiohttp's
            fail(f"cannot read this cluster's CraftSandboxes, nothing was adopted: {exc}")
        adopted = adopt_rows(store, rows, uids, dry_run=dry_run)
    verb = "would adopt" if dry_run else "adopted"
    taken = {row.row_id for row in adopted}
    for row in rows:
        sandbox = f"{row.namespace}/{row.name}"
        if row.row_id in taken:
            click.echo(f"{verb} {sandbox} (PAT {row.pat_id})")
        else:
            click.echo(f"left {sandbox} (PAT {row.pat_id}): {_why_left(row, uids)}")
    click.echo(f"{verb} {len(adopted)} credential rows as cluster {store.cluster_id!r}")


def _why_left(row: StoredCredential, uids: dict[tuple[str, str], str]) -> str:
    uid = uids.get((row.namespace, row.name))
    if uid is None:
        return "no such CraftSandbox in this cluster"
    if uid != row.sandbox_uid:
        return "this cluster's CraftSandbox of that name has another uid"
    return "this cluster already has a row of that name, or the row changed"
