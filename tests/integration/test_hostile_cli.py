"""A sandbox pod that holds onyx-cli's validation holds no reconcile worker: the PAT's
delivery runs on without the pass, and the sandbox says it is still validating."""

from __future__ import annotations

from collections.abc import Sequence

from craft_operator.config import Settings
from craft_operator.kube.exec import Stdin
from craft_operator.reconciler.steps.cli import DELIVER_ARGV
from tests.integration.helpers import condition, phase
from tests.integration.test_hostile_library import StoppedCommands, start
from tests.support.emulator import KubeEmulator
from tests.support.operator import eventually, running_operator
from tests.support.pod_exec import EmulatedPodExec


def is_delivery(argv: Sequence[str], stdin: Stdin) -> bool:
    """The PAT's delivery: its shell never reads the PAT nor runs onyx-cli."""
    return tuple(argv) == DELIVER_ARGV


async def test_a_pod_that_holds_its_validation_holds_no_reconcile_worker(
    emulator: KubeEmulator, settings: Settings, pod_exec: EmulatedPodExec
) -> None:
    # One reconcile worker only: a pass that waited on mallory's onyx-cli (up to its 60 s
    # timeout) would starve alice.
    one_worker = settings.model_copy(update={"workers": 1})
    transport = StoppedCommands(pod_exec, {"mallory"}, is_delivery)
    url = str(emulator.url).rstrip("/")
    async with running_operator(url, one_worker, exec_transport=transport):
        await start(emulator, "mallory")
        await eventually(
            lambda: condition(emulator, "mallory", "CLIValidated").get("reason") == "Validating",
            within=15,
            what="mallory's validation reported as running on",
        )
        await start(emulator, "alice")

        await phase(emulator, "alice", "Ready", within=15)
        validating = condition(emulator, "mallory", "CLIValidated")
        assert (validating["status"], validating["reason"]) == ("Unknown", "Validating")
        assert condition(emulator, "mallory", "Ready")["status"] == "False"
