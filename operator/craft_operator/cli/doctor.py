"""``craft-operator doctor``: check the settings and every dependency, say how to fix them."""

from __future__ import annotations

import json
import sys

import click

from craft_operator.cli._store import quiet_logging
from craft_operator.doctor import CheckResult, Status, run_checks

_UNICODE: dict[str, str] = {Status.OK: "✔", Status.WARN: "⚠", Status.FAIL: "✘", "dash": "—"}
_ASCII: dict[str, str] = {
    Status.OK: "[ok]",
    Status.WARN: "[warn]",
    Status.FAIL: "[FAIL]",
    "dash": "--",
}


def _symbols() -> dict[str, str]:
    """Check marks if stdout can encode them, else ASCII."""
    encoding = getattr(sys.stdout, "encoding", None) or "ascii"
    try:
        "".join(_UNICODE.values()).encode(encoding)
    except (UnicodeEncodeError, LookupError):
        return _ASCII
    return _UNICODE


def format_result(result: CheckResult, symbols: dict[str, str]) -> str:
    """``✔ name: detail``, or ``✘ name: what is wrong — how to fix it``."""
    line = f"{symbols[result.status]} {result.name}: {result.detail}"
    if result.fix and result.status is not Status.OK:
        line += f" {symbols['dash']} {result.fix}"
    return line


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the results as one JSON object.")
@click.option(
    "--skip-kubernetes",
    is_flag=True,
    help="Check only the settings, database, key ring and S3 (no API server).",
)
@click.option(
    "--peering",
    "peering_name",
    metavar="NAME",
    help="The operator peers through this ClusterKopfPeering (as its run --peering): check "
    "that it exists, and the grants on it. Default: CRAFT_PEERING_NAME.",
)
@click.option(
    "--standalone",
    is_flag=True,
    help="The operator runs alone (run --standalone): no peering object or grants to check.",
)
def doctor(
    as_json: bool, skip_kubernetes: bool, peering_name: str | None, standalone: bool
) -> None:
    """Check the settings, database, key ring, S3 and Kubernetes API access.

    Every check prints one line; a failure says how to fix it. Exits 1 if any check
    fails (warnings do not fail). The API permissions checked are those of the identity
    doctor runs as: run it in the operator's pod to check the operator's own, with the
    operator's peering, e.g.
    kubectl -n craft-system exec craft-operator-0 -- craft-operator doctor --peering craft-operator
    """
    if peering_name is not None and standalone:
        click.echo("craft-operator: use either --peering or --standalone, not both", err=True)
        sys.exit(2)
    quiet_logging()
    results = run_checks(
        kubernetes=not skip_kubernetes, peering=peering_name, standalone=standalone
    )
    failed = any(result.status is Status.FAIL for result in results)
    if as_json:
        payload = {"ok": not failed, "checks": [result.as_dict() for result in results]}
        click.echo(json.dumps(payload, indent=2))
    else:
        symbols = _symbols()
        for result in results:
            click.echo(format_result(result, symbols))
    sys.exit(1 if failed else 0)
