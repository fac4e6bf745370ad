"""Peering options: the priority from a StatefulSet ordinal, and one clear line for bad ones."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from craft_operator.cli import main
from craft_operator.cli.run import peering_options
from craft_operator.config import Settings
from craft_operator.peering.options import (
    PeeringError,
    PeeringOptions,
    ordinal_of,
    resolve_peering,
)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("pod", "ordinal"),
    [("craft-operator-0", 0), ("craft-operator-1", 1), ("a-b-12", 12)],
)
def test_the_ordinal_is_the_number_at_the_end_of_the_pod_name(pod: str, ordinal: int) -> None:
    assert ordinal_of(pod) == ordinal


@pytest.mark.parametrize("pod", ["craft-operator", "craft-operator-7d9f8-x2k4q", "op-01", "-1"])
def test_a_pod_name_without_an_ordinal_is_refused(pod: str) -> None:
    with pytest.raises(PeeringError, match="does not end in -<ordinal>"):
        ordinal_of(pod)


def test_pods_of_a_statefulset_get_distinct_priorities_the_first_one_highest() -> None:
    priorities = [
        resolve_peering(
            name="craft-operator", priority=100, from_ordinal=True, pod_name=f"craft-operator-{k}"
        ).priority
        for k in range(3)
    ]
    assert priorities == [100, 99, 98]


def test_without_a_peering_name_the_operator_is_standalone() -> None:
    assert resolve_peering(name=None, priority=5).standalone
    assert resolve_peering(name="", priority=0, standalone=True) == PeeringOptions()


def test_a_peering_carries_its_name_priority_identity_and_lifetime() -> None:
    options = resolve_peering(name="p", priority=7, identity="pod-a", lifetime=20)
    assert options == PeeringOptions(name="p", priority=7, identity="pod-a", lifetime=20)
    assert not options.standalone


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": "p", "standalone": True}, "--standalone contradicts peering 'p'"),
        ({"name": None, "from_ordinal": True}, "--priority-from-ordinal needs a peering name"),
        ({"name": "p", "from_ordinal": True}, "needs the pod's name in POD_NAME"),
        ({"name": "Not_A_Name"}, "peering name 'Not_A_Name' is not a valid object name"),
        ({"name": "p", "lifetime": 0}, "at least 1 second"),
        ({"name": None, "standalone": True, "from_ordinal": True}, "needs peering"),
    ],
)
def test_contradicting_or_bad_options_are_refused(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(PeeringError, match=message):
        resolve_peering(priority=0, **kwargs)


# The command line: `run` stops with one line on stderr before it looks for a cluster.


def run(args: list[str], env: dict[str, str], tmp_path: Path) -> tuple[int, list[str]]:
    clean = {"CRAFT_STATE_DIR": str(tmp_path), "POD_NAME": "", **env}
    result = CliRunner().invoke(main, ["run", *args], env=clean)
    return result.exit_code, result.stderr.splitlines()


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["--standalone", "--peering", "p"], {}, "--standalone contradicts peering 'p'"),
        (["--standalone"], {"CRAFT_PEERING_NAME": "p"}, "--standalone contradicts peering 'p'"),
        (["--priority", "5"], {}, "--priority needs a peering name"),
        (["--peering", "p", "--priority-from-ordinal"], {}, "needs the pod's name in POD_NAME"),
        (
            ["--peering", "p", "--priority-from-ordinal"],
            {"POD_NAME": "craft-operator-7d9f8-x2k4q"},
            "cannot derive a priority from pod name 'craft-operator-7d9f8-x2k4q'",
        ),
        (["--peering", "Bad_Name"], {}, "peering name 'Bad_Name' is not a valid object name"),
    ],
)
def test_run_refuses_bad_peering_options_in_one_line(
    args: list[str], env: dict[str, str], message: str, tmp_path: Path
) -> None:
    code, lines = run(args, env, tmp_path)
    assert code == 2
    assert len(lines) == 1, lines
    assert lines[0].startswith("craft-operator: ")
    assert message in lines[0]


def test_run_refuses_a_priority_that_is_not_a_number(tmp_path: Path) -> None:
    code, lines = run(["--peering", "p", "--priority", "high"], {}, tmp_path)
    assert code == 2
    assert any("'high' is not a valid integer" in line for line in lines)


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("CRAFT_PEERING_NAME", "Not_A_Name", "CRAFT_PEERING_NAME: String should match pattern"),
        ("CRAFT_PEERING_PRIORITY", "high", "CRAFT_PEERING_PRIORITY: Input should be a valid"),
        ("CRAFT_PEERING_LIFETIME", "0", "CRAFT_PEERING_LIFETIME: Input should be greater"),
    ],
)
def test_bad_peering_settings_name_their_variable(
    variable: str, value: str, message: str, tmp_path: Path
) -> None:
    code, lines = run([], {variable: value}, tmp_path)
    assert code == 2
    assert len(lines) == 1, lines
    assert message in lines[0]


def test_the_settings_supply_the_peering_when_the_options_do_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("POD_NAME", "craft-operator-1")
    settings = Settings(peering_name="craft-operator", peering_priority=50, peering_lifetime=30)
    options = peering_options(
        settings, name=None, priority=None, from_ordinal=True, standalone=False
    )
    assert options == PeeringOptions(name="craft-operator", priority=49, lifetime=30)
    explicit = peering_options(
        settings, name="other", priority=10, from_ordinal=False, standalone=False
    )
    assert (explicit.name, explicit.priority) == ("other", 10)
