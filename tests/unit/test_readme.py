"""The README tells the truth: every setting is documented, the quickstart targets exist."""

from __future__ import annotations

import re
from pathlib import Path

from craft_operator.config import ENV_PREFIX, Settings

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def settings_table() -> set[str]:
    section = README.split("## Settings", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `(CRAFT_[A-Z0-9_]+)` \|", section, flags=re.MULTILINE))


def test_the_settings_table_lists_every_setting_and_nothing_else() -> None:
    documented = settings_table()
    actual = {f"{ENV_PREFIX}{name.upper()}" for name in Settings.model_fields}
    assert documented == actual


def test_the_quickstart_make_targets_exist() -> None:
    quickstart = README.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    targets = set(re.findall(r"^make ([a-z-]+)", quickstart, flags=re.MULTILINE))
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert targets == {"run", "test"}
    for target in targets:
        assert re.search(rf"^{target}:", makefile, flags=re.MULTILINE), target


def test_every_cli_command_in_the_readme_exists() -> None:
    import click

    from craft_operator.cli import main

    section = README.split("## Commands", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"^craft-operator ([a-z-]+)", section, flags=re.MULTILINE))
    context = click.Context(main)
    # The commands are imported when looked up: each listed one must resolve to a command.
    commands = {name for name in main.list_commands(context) if main.get_command(context, name)}
    assert named <= commands, named - commands
    assert commands <= named, commands - named


def test_the_commands_section_names_every_crd_the_crd_command_prints() -> None:
    import click

    from craft_operator.cli.crd import crd

    section = README.split("## Commands", 1)[1].split("\n## ", 1)[0]
    [usage] = [text for text in section.splitlines() if text.startswith("craft-operator crd ")]
    flags = [option.opts[0] for option in crd.params if isinstance(option, click.Option)]
    assert flags
    assert [flag for flag in flags if flag not in usage] == [], usage


def posted_reasons() -> set[str]:
    """The event and condition reasons the operator's code spells out: as literals
    (``p.event("X", ...)``, ``reason="X"``, an event note ``("X", message)``) or as
    module constants (``ORPHANED = "PoolPodOrphaned"``), however they are passed on."""
    code = "\n".join(
        path.read_text(encoding="utf-8")
        for path in (ROOT / "operator" / "craft_operator").rglob("*.py")
    )
    reasons = set(re.findall(r'\.event\(\s*"([A-Za-z]+)"', code))
    reasons |= set(re.findall(r'reason="([A-Za-z]+)"', code))
    reasons |= set(re.findall(r'notes\.append\(\(\s*"([A-Za-z]+)"', code))
    constant = r'^[A-Z][A-Z0-9_]*(?:\s*:[^=\n]+)?\s*=\s*"([A-Z][a-z]+(?:[A-Z][a-z0-9]*)+)"\s*$'
    return reasons | set(re.findall(constant, code, flags=re.MULTILINE))


def test_every_reason_the_operator_posts_is_in_the_readme() -> None:
    """On-call staff look up a reason they see in `kubectl describe`."""
    reasons = posted_reasons()
    found = {"PodCreated", "SandboxSleeping", "PATRevoked", "PoolPodOrphaned", "PoolPodsCreated"}
    assert found <= reasons  # the scan finds each way of spelling one
    assert sorted(reason for reason in reasons if f"`{reason}`" not in README) == []


def test_the_pool_scaling_advice_selects_series_every_pool_exports() -> None:
    """The query the **Scaling** paragraph gives an autoscaler selects series that a pool has
    from its first pass, a pool scaled to zero included (at zero until a sandbox asks)."""
    from craft_operator.metrics import Metrics

    advice = README.split("**Scaling**", 1)[1].split("\n\n", 1)[0].replace("\n", " ")
    [query] = [span for span in re.findall(r"`([^`]+)`", advice) if "rate(" in span]
    metrics = Metrics()
    metrics.pool_seen("N", "P")
    exported = [
        (sample.name, sample.labels)
        for family in metrics.registry.collect()
        for sample in family.samples
    ]
    selectors = re.findall(r"(craft_[a-z_]+)\{([^}]*)\}", query)
    assert {name for name, _ in selectors} == {
        "craft_pool_claims_total",
        "craft_pool_cold_starts_total",
    }
    for name, matchers in selectors:
        wanted = dict(re.findall(r'([a-z_]+)="([^"]*)"', matchers))
        assert any(
            found == name and wanted.items() <= labels.items() for found, labels in exported
        ), (name, wanted)


def test_the_readme_says_a_device_request_alone_passes_admission_and_why() -> None:
    """A hugepages or extended resource requested without a limit passes the CRD (its limit
    may come from CRAFT_SANDBOX_RESOURCES; tests/unit/api/test_input_rules.py): the README
    must not have the backend expect a refusal at admission that never comes."""
    refused = README.split("Over budget is refused at admission", 1)[1].split("\n\n", 1)[0]
    said = " ".join(refused.split())
    assert "requested without a limit is admitted" in said
    assert "`CRAFT_SANDBOX_RESOURCES`" in said
    assert "`InvalidResources`" in said


def test_the_readme_says_which_pool_column_is_the_wanted_count_and_which_the_pods_there() -> None:
    """`spec.replicas` and `status.replicas` share a name: the README says which column
    shows which, so nobody reads REPLICAS as the pods the pool has."""
    from craft_operator.api.pool_crd import printer_columns

    said = " ".join(
        README.split("`kubectl get csbpool` shows", 1)[1].split("The counts")[0].split()
    )
    replicas = [column for column in printer_columns() if column["jsonPath"].endswith(".replicas")]
    assert {column["jsonPath"] for column in replicas} == {".spec.replicas", ".status.replicas"}
    for column in replicas:
        assert f"`{column['name'].upper()}` (`{column['jsonPath'][1:]}`" in said, column
