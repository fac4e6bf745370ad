"""``make test``'s two pytest runs, with a stand-in pytest that exits as told."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
#: Exits with $UNIT_EXIT for the unit and integration run, $OTHER_EXIT for the other.
FAKE_PYTEST = """#!/bin/sh
echo "pytest $*" >> "$CALLS"
case "$*" in
    *--ignore=tests/unit*) exit "$OTHER_EXIT" ;;
    *) exit "$UNIT_EXIT" ;;
esac
"""


def make_test(tmp_path: Path, unit_exit: int, other_exit: int) -> tuple[int, str, list[str]]:
    """``make test`` on a virtualenv whose pytest exits ``unit_exit`` for the unit and
    integration run and ``other_exit`` for the other: its exit code, stderr, the runs."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    pytest_ = venv / "bin" / "pytest"
    pytest_.write_text(FAKE_PYTEST)
    pytest_.chmod(0o755)
    (venv / ".installed-dev").touch()  # newer than pyproject.toml: nothing is installed
    calls = tmp_path / "calls"
    calls.touch()
    run = subprocess.run(
        ["make", "--no-print-directory", "-C", str(ROOT), "test", f"VENV={venv}", "TEST_WORKERS=0"],
        env={
            "PATH": "/usr/bin:/bin",
            "CALLS": str(calls),
            "UNIT_EXIT": str(unit_exit),
            "OTHER_EXIT": str(other_exit),
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    return run.returncode, run.stderr, calls.read_text().splitlines()


@pytest.mark.parametrize(("unit_exit", "other_exit"), [(0, 0), (5, 0), (0, 5)])
def test_make_test_passes_when_a_run_selected_tests_that_passed(
    tmp_path: Path, unit_exit: int, other_exit: int
) -> None:
    code, stderr, calls = make_test(tmp_path, unit_exit, other_exit)

    assert code == 0, stderr
    assert len(calls) == 2


def test_make_test_fails_when_neither_run_selected_a_test(tmp_path: Path) -> None:
    # PYTEST_ARGS='-k typo' ran nothing at all, and passed.
    code, stderr, calls = make_test(tmp_path, 5, 5)

    assert len(calls) == 2
    # make's own exit code is 2 for any failed recipe; it names the recipe's, pytest's 5.
    assert code == 2
    assert stderr.rstrip().endswith("Error 5")
    assert "PYTEST_ARGS selected no test in either run" in stderr


@pytest.mark.parametrize(("unit_exit", "other_exit", "runs"), [(1, 0, 1), (5, 1, 2), (0, 2, 2)])
def test_make_test_fails_when_a_run_fails(
    tmp_path: Path, unit_exit: int, other_exit: int, runs: int
) -> None:
    code, _stderr, calls = make_test(tmp_path, unit_exit, other_exit)

    assert code != 0
    assert len(calls) == runs
