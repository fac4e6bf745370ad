"""One line of ``doctor``'s report: a check's name, outcome, finding and fix."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import StrEnum


class Status(StrEnum):
    """The outcome of one check; only ``fail`` makes ``doctor`` exit non-zero."""

    OK = "ok"
    WARN = "warn"
    FAIL = "fail"


@dataclass(frozen=True)
class CheckResult:
    """One line of the report: ``detail`` says what was found, ``fix`` what to do about it."""

    name: str
    status: Status
    detail: str
    fix: str = ""

    def as_dict(self) -> dict[str, str]:
        """The result as plain JSON-able strings."""
        return {key: str(value) for key, value in asdict(self).items()}


def ok(name: str, detail: str) -> CheckResult:
    """A passed check."""
    return CheckResult(name, Status.OK, detail)


def warn(name: str, detail: str, fix: str = "") -> CheckResult:
    """A check that passed with something to look at (does not fail ``doctor``)."""
    return CheckResult(name, Status.WARN, detail, fix)


def fail(name: str, detail: str, fix: str) -> CheckResult:
    """A failed check."""
    return CheckResult(name, Status.FAIL, detail, fix)
