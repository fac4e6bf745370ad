"""``craft-operator crd``: print the generated CustomResourceDefinitions."""

from __future__ import annotations

import click

from craft_operator.api.crd import crd_yaml
from craft_operator.api.pool_crd import pool_crd_yaml
from craft_operator.policy.crd import policy_crd_yaml


@click.command()
@click.option(
    "--policy",
    is_flag=True,
    help="Print the CraftSandboxPolicy CRD instead (crds/craftsandboxpolicies.*.yaml).",
)
@click.option(
    "--pool",
    is_flag=True,
    help="Print the CraftSandboxPool CRD instead (crds/craftsandboxpools.*.yaml).",
)
def crd(policy: bool, pool: bool) -> None:
    """Print the CraftSandbox CRD as YAML (the same as crds/ in the repository).

    The operator needs every CRD of crds/ (CraftSandbox, CraftSandboxPool,
    CraftSandboxPolicy and kopf's ClusterKopfPeering): install them all with
    kubectl apply -k crds
    """
    if policy and pool:
        raise click.UsageError("--policy and --pool print different CRDs: choose one")
    text = policy_crd_yaml() if policy else pool_crd_yaml() if pool else crd_yaml()
    click.echo(text, nl=False)
