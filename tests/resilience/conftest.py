"""Fixtures of the resilience suite: a seed, a size, the emulator, the operator process.

Every random choice in a resilience test comes from ``rng``, seeded from
``RESILIENCE_SEED`` (or a fresh seed, printed). A failing test's report names its seed, so
``RESILIENCE_SEED=<seed> pytest tests/resilience -k <test>`` replays it. The suite runs at a
reduced size by default (CI); ``RESILIENCE_SCALE=full`` runs the sizes the issue names.
"""

from __future__ import annotations

import dataclasses
import os
import random
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from craft_operator.credentials.keyring import generate_key_entry
from craft_operator.devtools.postgres import ThrowawayPostgres
from tests.integration.conftest import emulator  # noqa: F401 -- the same admitting emulator
from tests.resilience.harness import OperatorProcess
from tests.support.emulator import KubeEmulator
from tests.support.leaks import (
    LeakReport,
    key_forms,
    search_for_leaks,
    secret_forms,
    secret_tokens,
)
from tests.support.pod_exec import EmulatedPodExec
from tests.support.postgres import onyx_database as onyx_database_url
from tests.support.s3 import S3Server, running_s3_server, use_fake_aws_credentials

SEED_KEY = pytest.StashKey[int]()


@dataclasses.dataclass(frozen=True)
class Scale:
    """How big a run is."""

    name: str
    sandboxes: int
    kills: int
    outage_seconds: float
    hostile_copies: int


SCALES = {
    "ci": Scale("ci", sandboxes=40, kills=10, outage_seconds=8.0, hostile_copies=1),
    "full": Scale("full", sandboxes=200, kills=20, outage_seconds=30.0, hostile_copies=3),
}


@pytest.fixture(scope="session")
def scale() -> Scale:
    """The size of this run: ``RESILIENCE_SCALE`` (``ci`` by default, or ``full``)."""
    name = os.environ.get("RESILIENCE_SCALE", "ci")
    if name not in SCALES:
        raise pytest.UsageError(f"RESILIENCE_SCALE must be one of {sorted(SCALES)}, not {name!r}")
    return SCALES[name]


@pytest.fixture
def seed(request: pytest.FixtureRequest) -> int:
    """This test's seed: ``RESILIENCE_SEED`` if set, else a fresh one (reported on failure)."""
    value = int(os.environ.get("RESILIENCE_SEED") or secrets.randbelow(2**32))
    request.node.stash[SEED_KEY] = value
    print(f"resilience seed: {value}")
    return value


@pytest.fixture
def rng(seed: int) -> random.Random:
    """The test's only source of randomness."""
    return random.Random(seed)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Iterator[None] | pytest.TestReport:
    """Name the seed in a failed test's report, with the command that replays it."""
    report: pytest.TestReport = yield
    seed = item.stash.get(SEED_KEY, None)
    if report.failed and seed is not None:
        report.sections.append(
            (
                "resilience seed",
                f"seed {seed}; replay with: RESILIENCE_SEED={seed} "
                f"RESILIENCE_SCALE={os.environ.get('RESILIENCE_SCALE', 'ci')} "
                f".venv/bin/pytest '{item.nodeid}'",
            )
        )
    return report


@pytest.fixture(scope="session")
def canary_key() -> str:
    """The encryption key every operator process in the suite uses; it must never show."""
    return generate_key_entry("canary").get_secret_value()


@pytest.fixture
def key_canaries(canary_key: str) -> set[str]:
    """The forms of the canary key the leak search looks for."""
    return key_forms(canary_key)


@pytest.fixture
def pods(emulator: KubeEmulator, tmp_path: Path) -> EmulatedPodExec:  # noqa: F811
    """The pods' side of exec, served on the emulator's exec API; onyx-cli always passes."""
    double = EmulatedPodExec(emulator, tmp_path / "pods", scripted_cli=lambda *_: 0)
    double.serve_exec_api()
    return double


@pytest.fixture
def state(tmp_path: Path) -> Path:
    """The operator's state directory (its SQLite database and the logs)."""
    path = tmp_path / "operator"
    path.mkdir()
    return path


@pytest.fixture
def onyx_database(postgres_server: ThrowawayPostgres) -> str:
    """A fresh database with Onyx's ``user`` and ``personal_access_token`` tables; its URL."""
    return onyx_database_url(postgres_server)


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Server]:
    """moto's S3 server, with fake credentials in this process's environment."""
    use_fake_aws_credentials(monkeypatch)
    yield from running_s3_server()


Launch = Callable[..., OperatorProcess]
LeakCheck = Callable[..., LeakReport]


@pytest.fixture
def launch(emulator: KubeEmulator, state: Path, canary_key: str) -> Launch:  # noqa: F811
    """Make (not start) the operator process for a namespace, with the canary key ring.

    ``launch(namespace, CRAFT_X="...")`` adds settings (environment variables).
    """

    def make(namespace: str, **env: str) -> OperatorProcess:
        return OperatorProcess(
            str(emulator.url).rstrip("/"),
            state,
            namespace,
            {
                "CRAFT_SERVER_URL": "http://onyx.invalid:8080",
                "CRAFT_ENCRYPTION_KEYS": canary_key,
                # Required with Postgres (Onyx mode); harmless on SQLite.
                "CRAFT_CLUSTER_ID": "resilience",
                **env,
            },
        )

    return make


@pytest.fixture
def assert_no_leaks(emulator: KubeEmulator, key_canaries: set[str]) -> LeakCheck:  # noqa: F811
    """Search everything the run left for the canary key and every PAT ever minted.

    ``assert_no_leaks(operator, texts={...})`` fails on any hit; returns the report.
    """

    def check(operator: OperatorProcess, texts: dict[str, str] | None = None) -> LeakReport:
        tokens = secret_tokens(emulator)
        canaries = key_canaries.union(*(secret_forms(token) for token in tokens))
        report = search_for_leaks(
            emulator, canaries, logs=operator.logs, metrics=operator.metrics, texts=texts
        )
        assert not report.hits, f"secrets leaked: {report.hits}"
        return report

    return check


def s3_settings(endpoint: str, bucket: str) -> dict[str, str]:
    """The operator's S3 settings for moto (fake credentials, never the developer's)."""
    return {
        "CRAFT_S3_BUCKET": bucket,
        "CRAFT_S3_ENDPOINT_URL": endpoint,
        "CRAFT_S3_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
    }
