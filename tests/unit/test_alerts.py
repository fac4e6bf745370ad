"""The example alerts and the metrics table refer only to metrics the operator exports,
and the table lists every one of them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from prometheus_client import CollectorRegistry

from craft_operator.metrics import Metrics

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "manifests" / "monitoring" / "prometheusrule.yaml"
DOCS = ROOT / "docs" / "alerts.md"
METRIC_NAME = re.compile(r"\bcraft_[a-z_]+\b")


def exported() -> tuple[set[str], set[str]]:
    """Metric family names, and every series name (``_total``, ``_bucket``, ...)."""
    families: set[str] = set()
    series: set[str] = set()
    for family in Metrics(CollectorRegistry()).registry.collect():
        families.add(family.name)
        series.add(family.name)
        series.update(sample.name for sample in family.samples)
        if family.type == "counter":
            series.add(f"{family.name}_total")
        if family.type == "histogram":
            series.update(f"{family.name}_{suffix}" for suffix in ("bucket", "count", "sum"))
    return families, series


def rules() -> list[dict[str, object]]:
    document = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    assert document["kind"] == "PrometheusRule"
    return [rule for group in document["spec"]["groups"] for rule in group["rules"]]


def test_every_alert_uses_only_exported_craft_metrics() -> None:
    _, series = exported()
    for rule in rules():
        used = set(METRIC_NAME.findall(str(rule["expr"])))
        assert used <= series, f"{rule['alert']} uses unknown metrics {used - series}"


def test_every_alert_has_a_severity_a_summary_and_what_to_do() -> None:
    for rule in rules():
        assert rule["labels"]["severity"] in {"critical", "warning"}  # type: ignore[index]
        assert rule["annotations"]["summary"]  # type: ignore[index]
        assert rule["annotations"]["description"]  # type: ignore[index]


def test_the_alert_table_in_the_docs_lists_exactly_the_rules() -> None:
    documented = set(re.findall(r"^\| `(Craft[A-Za-z]+)` \|", DOCS.read_text(), re.MULTILINE))
    assert documented == {str(rule["alert"]) for rule in rules()}


def test_the_metrics_table_in_the_docs_lists_every_metric() -> None:
    families, _ = exported()
    table = re.findall(r"^\| `(craft_[a-z_]+)` \|", DOCS.read_text(), re.MULTILINE)
    assert set(table) == families


def rule(name: str) -> dict[str, object]:
    """The alert rule called ``name``."""
    return next(rule for rule in rules() if rule["alert"] == name)


def runbook(name: str) -> str:
    """What on-call reads for alert ``name``: its description and its row in the docs."""
    row = next(line for line in DOCS.read_text().splitlines() if line.startswith(f"| `{name}` |"))
    return str(rule(name)["annotations"]["description"]) + row  # type: ignore[index]


def reasons(metric: str) -> set[str]:
    """The ``reason`` label values the operator exports for ``metric`` (all declared)."""
    return {
        sample.labels["reason"]
        for family in Metrics(CollectorRegistry()).registry.collect()
        if family.name == metric
        for sample in family.samples
        if "reason" in sample.labels
    }


def left_out(name: str) -> set[str]:
    """The reasons alert ``name``'s expression leaves out (``reason!~"a|b"``, ``reason!="a"``)."""
    found = re.search(r'reason!(?:~|=)"([^"]*)"', str(rule(name)["expr"]))
    return set(found.group(1).split("|")) if found else set()


@pytest.mark.parametrize(
    ("alert", "metric"),
    [
        ("CraftPATErrors", "craft_pat_errors"),
        ("CraftUserLibrarySyncErrors", "craft_user_library_sync_errors"),
    ],
)
def test_every_reason_an_alert_fires_for_or_leaves_out_is_in_its_runbook(
    alert: str, metric: str
) -> None:
    """A page naming a reason its runbook never mentions leaves on-call nothing to do."""
    exported_reasons = reasons(metric)
    assert left_out(alert) <= exported_reasons, "it leaves out reasons that exist"
    unexplained = sorted(reason for reason in exported_reasons if reason not in runbook(alert))
    assert unexplained == []


def test_a_deleted_tenant_is_not_paged_as_a_broken_credential_database() -> None:
    """Its schema dropped in Onyx, a tenant's sandboxes fail one tenant's way; doctor, which
    the database's runbook names, does not look at tenants' schemas."""
    from craft_operator.credentials.errors import TenantGoneError
    from craft_operator.reconciler.steps.credentials import failure_reason

    reason = failure_reason(TenantGoneError("no schema 'tenant_x'"))
    assert reason == "TenantGone"
    assert reason in left_out("CraftPATErrors")


def test_a_file_changed_while_it_synced_does_not_count_towards_the_sync_error_alert() -> None:
    from craft_operator.library.errors import S3ObjectChangedError

    assert S3ObjectChangedError.reason in left_out("CraftUserLibrarySyncErrors")


def test_the_metrics_table_names_every_cold_start_reason() -> None:
    """On-call reads what each ``reason`` of ``craft_pool_cold_starts`` means there."""
    from craft_operator.metrics.pools import ColdStartReason

    [row] = [
        line
        for line in DOCS.read_text(encoding="utf-8").splitlines()
        if line.startswith("| `craft_pool_cold_starts`")
    ]
    missing = [reason.value for reason in ColdStartReason if f"`{reason.value}`" not in row]
    assert missing == []
    assert "`Other`" in row
