"""``craft-operator crd``: print the generated CustomResourceDefinition."""

from __future__ import annotations

import click

from craft_operator.api.crd import crd_yaml


@click.command()
def crd() -> None:
    """Print the CraftSandbox CRD as YAML (the same as crds/ in the repository).

    Apply it with: craft-operator crd | kubectl apply -f -
    """
    click.echo(crd_yaml(), nl=False)
