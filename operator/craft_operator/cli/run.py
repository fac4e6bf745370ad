"""``craft-operator run``: start the operator."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import sys
from collections.abc import Callable
from urllib.parse import urlsplit

import click
import uvloop

from craft_operator.access import AccessVerdict, check_operator_access
from craft_operator.config import (
    Settings,
    SettingsError,
    check_namespace_names,
    load_settings,
    split_namespaces,
)
from craft_operator.credentials.errors import CredentialsError
from craft_operator.credentials.factory import check_cluster_id_setting, check_key_ring_loads
from craft_operator.kube.connection import (
    ClusterUnreachableError,
    check_reachable,
    discover_connection,
)
from craft_operator.peering.options import (
    POD_NAME_VARIABLE,
    PeeringError,
    PeeringOptions,
    resolve_peering,
)
from craft_operator.reconciler.finalizer import removal_by_hand
from craft_operator.runtime import StartupError, run_operator


def fail(message: str, code: int = 1) -> None:
    """Print one line to stderr and exit; used for every expected start-up failure."""
    click.echo(f"craft-operator: {message}", err=True)
    sys.exit(code)


def _namespace_names(values: tuple[str, ...]) -> tuple[str, ...]:
    """``-n`` values as CRAFT_NAMESPACES takes them: comma lists split, blanks dropped, and
    each a namespace name (kopf would drop a name with a ``,`` or ``*`` and watch nothing)."""
    names = tuple(split_namespaces(values))
    try:
        check_namespace_names(names)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--namespace") from None
    if values and not names:
        raise click.BadParameter("names no namespace", param_hint="--namespace")
    return names


def _liveness_url(value: str | None) -> str | None:
    """``--liveness`` as kopf serves it: ``http://HOST:PORT/PATH``, a port that exists."""
    if value is None:
        return None
    parts = urlsplit(value)
    try:
        port = parts.port
    except ValueError:
        port = -1
    if parts.scheme != "http" or not parts.hostname or port == -1:
        raise click.BadParameter(
            f"{value!r} is not an http://HOST:PORT/PATH URL with a port from 1 to 65535",
            param_hint="--liveness",
        )
    return value


def _liveness_problem(url: str | None, settings: Settings) -> str | None:
    """Why the liveness endpoint could not be served (its port taken, the metrics port's),
    said before anything starts: kopf would end the run with a traceback after start-up."""
    if url is None:
        return None
    parts = urlsplit(url)
    port = parts.port or 80
    if settings.metrics_port and port == settings.metrics_port:
        return (
            f"--liveness {url} and CRAFT_METRICS_PORT are the same port {port}: give them "
            "different ones"
        )
    try:
        with socket.create_server((parts.hostname or "", port)):
            pass
    except OSError as exc:
        return f"--liveness {url} cannot be served: {exc.strerror or exc}"
    return None


@click.command()
@click.option(
    "-n",
    "--namespace",
    "namespaces",
    multiple=True,
    help="Watch this namespace (repeatable, or a comma list as CRAFT_NAMESPACES). Default: "
    "CRAFT_NAMESPACES, else all namespaces.",
    callback=lambda _context, _param, values: _namespace_names(values),
)
@click.option(
    "-A", "--all-namespaces", is_flag=True, help="Watch all namespaces, ignoring CRAFT_NAMESPACES."
)
@click.option(
    "--standalone",
    is_flag=True,
    help="Run alone, without peering (also the default when no peering name is set).",
)
@click.option(
    "--peering",
    "peering_name",
    metavar="NAME",
    help="Peer through this kopf peering object (active/standby). Default: CRAFT_PEERING_NAME.",
)
@click.option(
    "--priority",
    type=int,
    metavar="N",
    help="Priority in the peering; the highest live replica works. Default: "
    "CRAFT_PEERING_PRIORITY.",
)
@click.option(
    "--priority-from-ordinal",
    is_flag=True,
    help=f"Subtract the StatefulSet ordinal at the end of ${POD_NAME_VARIABLE} from the "
    "priority, so that the replicas' priorities differ (pod -0 is preferred).",
)
@click.option(
    "--liveness",
    "liveness_endpoint",
    metavar="URL",
    help="Serve kopf's liveness probe, e.g. http://0.0.0.0:8080/healthz.",
    callback=lambda _context, _param, value: _liveness_url(value),
)
@click.option("-v", "--verbose", is_flag=True, help="Log at debug level.")
def run(
    namespaces: tuple[str, ...],
    all_namespaces: bool,
    standalone: bool,
    peering_name: str | None,
    priority: int | None,
    priority_from_ordinal: bool,
    liveness_endpoint: str | None,
    verbose: bool,
) -> None:
    """Run the operator against the in-cluster config or the current kube context."""
    _configure_logging(verbose)
    if namespaces and all_namespaces:
        fail("use either --namespace or --all-namespaces, not both", code=2)
    try:
        settings = load_settings()
    except SettingsError as exc:
        fail(str(exc), code=2)
        return
    watched: list[str] = [] if all_namespaces else list(namespaces or settings.namespaces)
    try:
        peering = peering_options(
            settings,
            name=peering_name,
            priority=priority,
            from_ordinal=priority_from_ordinal,
            standalone=standalone,
        )
    except PeeringError as exc:
        fail(str(exc), code=2)
        return
    try:
        # Loaded (file read, entries parsed) here, not when the store opens on the first
        # sandbox: a bad ring is one line now, never a condition on every sandbox.
        check_key_ring_loads(settings, peering=not peering.standalone)
        check_cluster_id_setting(settings)
    except CredentialsError as exc:
        fail(str(exc), code=2)
        return
    problem = _liveness_problem(liveness_endpoint, settings)
    if problem is not None:
        fail(problem)
        return
    verdict = _cluster_problem(settings, watched, peering)
    if verdict.problem is not None:
        fail(verdict.problem)
        return
    _warn_not_there(verdict)
    try:
        with (
            contextlib.suppress(KeyboardInterrupt),
            asyncio.Runner(loop_factory=loop_factory(settings.event_loop)) as runner,
        ):
            runner.run(
                run_operator(
                    settings,
                    namespaces=watched,
                    peering=peering,
                    liveness_endpoint=liveness_endpoint,
                )
            )
    except StartupError as exc:
        fail(str(exc))


def loop_factory(name: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The factory of the event loop named by ``CRAFT_EVENT_LOOP`` (None: asyncio's own)."""
    if name == "uvloop":
        # uvloop's loop and transports, in C, took about 5 % off the operator's CPU per claim
        # (bench/pool_claims.py at 3/s); "asyncio" is the way back should one misbehave.
        return uvloop.new_event_loop
    return None


#: Libraries whose DEBUG records hold credentials, kept at INFO even with ``-v``: botocore
#: dumps STS answers (secret keys, session tokens) and signed requests, urllib3 presigned
#: URLs with their session token, the Kubernetes client the bodies it reads (Secrets).
CREDENTIAL_LOGGERS = ("botocore", "boto3", "s3transfer", "urllib3", "kubernetes")


def _configure_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    for name in CREDENTIAL_LOGGERS:
        logging.getLogger(name).setLevel(logging.INFO)
    if not verbose:
        # kopf logs every watch event its handlers see at INFO; ours only feed a queue, and
        # the reconciler logs and posts events for whatever it changes.
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)


def _warn_not_there(verdict: AccessVerdict) -> None:
    log = logging.getLogger(__name__)
    if verdict.terminating:
        log.warning(
            "namespace(s) %s: being deleted, and the operator's Role there is gone already; "
            "its watches there fail until then (their CraftSandboxes keep the namespace "
            "until their finalizer is removed by hand: %s; the orphan sweep revokes their "
            "PATs once it is gone: README, Deleting a sandbox namespace)",
            ", ".join(verdict.terminating),
            removal_by_hand("NAME", "NAMESPACE"),
        )
    if verdict.missing:
        log.warning(
            "namespace(s) %s: do not exist; watched all the same, and served once made with "
            "manifests/sandbox-namespace (a typo in CRAFT_NAMESPACES? one deleted: take it "
            "out once the orphan sweep has seen it gone)",
            ", ".join(verdict.missing),
        )


def _cluster_problem(
    settings: Settings, watched: list[str], peering: PeeringOptions
) -> AccessVerdict:
    """Why the operator cannot work against the cluster (unreachable, or without the access
    it needs in ``watched``), if it cannot, and which served namespaces are not there."""
    try:
        info = discover_connection()
        asyncio.run(check_reachable(info))
    except ClusterUnreachableError as exc:
        return AccessVerdict(str(exc))
    # A served namespace without the operator's Role would show only as failing watches and
    # a first listing that never completes, for every namespace: refuse to start instead.
    template = settings.skill_template_configmap_ref
    return asyncio.run(
        check_operator_access(
            info,
            watched,
            peering=not peering.standalone,
            template_namespace=template[0] if template is not None else None,
            operator_namespace=settings.operator_namespace,
        )
    )


def peering_options(
    settings: Settings,
    *,
    name: str | None,
    priority: int | None,
    from_ordinal: bool,
    standalone: bool,
) -> PeeringOptions:
    """The replica's peering from the options, falling back to the settings and $POD_NAME."""
    if name is not None and not name.strip():
        raise PeeringError(
            "--peering names no peering object (an empty value); pass its name, or --standalone"
        )
    options = resolve_peering(
        name=name if name is not None else settings.peering_name,
        priority=priority if priority is not None else settings.peering_priority,
        from_ordinal=from_ordinal,
        standalone=standalone,
        pod_name=os.environ.get(POD_NAME_VARIABLE),
        lifetime=settings.peering_lifetime,
    )
    if options.standalone and priority is not None:
        raise PeeringError("--priority needs a peering name (--peering or CRAFT_PEERING_NAME)")
    return options
