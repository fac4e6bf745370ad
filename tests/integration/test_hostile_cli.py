"""A sandbox pod that holds onyx-cli's validation holds no reconcile worker: the PAT's
delivery runs on without the pass, and the sandbox says it is still validating."""

from __future__ import annotations

from collections.abc import Sequence

from craft_operator.config import Settings
from craft_operator.kube.exec import ExecResult, Stdin
from craft_operator.reconciler.steps.cli import DELIVER_ARGV
from tests.integration.conftest import SANDBOXES
from tests.integration.helpers import NAMESPACE, condition, phase, pod, sandbox
from tests.support.emulator import KubeEmulator
from tests.support.operator import eventually, running_operator
from tests.support.pod_exec import EmulatedPodExec, mark_pod_running


class StoppedValidations:
    """Exec into the emulator's pods, but in the ``stopped`` pods the agent stops the PAT's
    delivery (SIGSTOP on its shell): it never reads the PAT nor runs onyx-cli."""

    def __init__(self, inner: EmulatedPodExec, stopped: set[str]) -> None:
        self.inner = inner
        self.stopped = stopped

    async def run(
        self,
        namespace: str,
        pod: str,
        container: str,
        argv: Sequence[str],
        *,
        stdin: Stdin = None,
        timeout: float | None = None,  # noqa: ASYNC109 -- the ExecTransport interface
        max_output_bytes: int | None = None,
    ) -> ExecResult:
        if pod in self.stopped and tuple(argv) == DELIVER_ARGV:
            argv = [argv[0], argv[1], "kill -STOP $$\n" + argv[2], *argv[3:]]
        return await self.inner.run(
            namespace,
            pod,
            container,
            argv,
            stdin=stdin,
            timeout=timeout,
            max_output_bytes=max_output_bytes,
        )


async def start(emulator: KubeEmulator, name: str) -> None:
    emulator.create(SANDBOXES, sandbox(name))
    await eventually(lambda: pod(emulator, name), what=f"the pod of {name}")
    mark_pod_running(emulator, NAMESPACE, name)


async def test_a_pod_that_holds_its_validation_holds_no_reconcile_worker(
    emulator: KubeEmulator, settings: Settings, pod_exec: EmulatedPodExec
) -> None:
    # One reconcile worker only: a pass that waited on mallory's onyx-cli (up to its 60 s
    # timeout) would starve alice.
    one_worker = settings.model_copy(update={"workers": 1})
    transport = StoppedValidations(pod_exec, {"mallory"})
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
