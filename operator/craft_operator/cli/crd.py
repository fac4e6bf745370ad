"""``craft-operator crd``: print the generated CustomResourceDefinitions."""

from __future__ import annotations

import click

from craft_operator.api.crd import crd_yaml
from craft_operator.policy.crd import policy_crd_yaml


@click.command()
@click.option(
    "--policy",
    is_flag=True,
    help="Print the CraftSandboxPolicy CRD instead (crds/craftsandboxpolicies.*.yaml).",
)
def crd(policy: bool) -> None:
    """Print the CraftSandbox CRD as YAML (the same as crds/ in the repository).

    Apply it with: craft-operator crd | kubectl apply -f -
    """
    click.echo(policy_crd_yaml() if policy else crd_yaml(), nl=False)
