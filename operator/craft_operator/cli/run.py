"""``craft-operator run``: start the operator."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys

import click

from craft_operator.config import SettingsError, load_settings
from craft_operator.kube.connection import (
    ClusterUnreachableError,
    check_reachable,
    discover_connection,
)
from craft_operator.runtime import run_operator


def fail(message: str, code: int = 1) -> None:
    """Print one line to stderr and exit; used for every expected start-up failure."""
    click.echo(f"craft-operator: {message}", err=True)
    sys.exit(code)


@click.command()
@click.option(
    "-n",
    "--namespace",
    "namespaces",
    multiple=True,
    help="Watch this namespace (repeatable). Default: CRAFT_NAMESPACES, else all namespaces.",
)
@click.option(
    "-A", "--all-namespaces", is_flag=True, help="Watch all namespaces, ignoring CRAFT_NAMESPACES."
)
@click.option(
    "--standalone",
    is_flag=True,
    help="Do not coordinate with other operator replicas (no peering).",
)
@click.option(
    "--liveness",
    "liveness_endpoint",
    metavar="URL",
    help="Serve kopf's liveness probe, e.g. http://0.0.0.0:8080/healthz.",
)
@click.option("-v", "--verbose", is_flag=True, help="Log at debug level.")
def run(
    namespaces: tuple[str, ...],
    all_namespaces: bool,
    standalone: bool,
    liveness_endpoint: str | None,
    verbose: bool,
) -> None:
    """Run the operator against the in-cluster config or the current kube context."""
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not verbose:
        # kopf logs every watch event its handlers see at INFO; ours only feed a queue, and
        # the reconciler logs and posts events for whatever it changes.
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    if namespaces and all_namespaces:
        fail("use either --namespace or --all-namespaces, not both", code=2)
    try:
        settings = load_settings()
    except SettingsError as exc:
        fail(str(exc), code=2)
        return
    watched: list[str] = [] if all_namespaces else list(namespaces or settings.namespaces)
    try:
        info = discover_connection()
        asyncio.run(check_reachable(info))
    except ClusterUnreachableError as exc:
        fail(str(exc))
        return
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(
            run_operator(
                settings,
                namespaces=watched,
                standalone=standalone,
                liveness_endpoint=liveness_endpoint,
            )
        )
