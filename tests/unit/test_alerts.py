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
