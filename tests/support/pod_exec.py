"""Exec doubles for the integration tier: commands "in the pod" run on this machine.

:class:`EmulatedPodExec` answers like the real exec API would for the pods stored in the
emulator (a missing or not-running pod cannot be exec'd into), and runs the argv locally:
``onyx-cli`` with the environment the pod would have (``ONYX_PAT`` resolved from the
Secret the pod references), everything else through the package's ``LocalExec`` with
``/workspace`` mapped to a temporary directory.
"""

from __future__ import annotations

import asyncio
import base64
import os
import shutil
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from craft_operator.devtools.daemons import ONYX_CLI_WRAPPER
from craft_operator.kube.exec import ExecResult, ExecUnavailableError, Stdin
from craft_operator.kube.exec_local import LocalExec
from craft_operator.reconciler.steps.cli import (
    DELIVER_ARGV,
    EXIT_NOT_DELIVERED,
    WRITE_PAT_AND_SKILL_SCRIPT,
    WRITE_PAT_SCRIPT,
)
from tests.support.emulator import KubeEmulator

ScriptedCli = Callable[[str, str], int]
#: The first half of the operator's delivery scripts: write what stdin holds into the pod.
WRITE_PAT = ("sh", "-c", WRITE_PAT_SCRIPT)
WRITE_PAT_AND_SKILL = ("sh", "-c", WRITE_PAT_AND_SKILL_SCRIPT)


@dataclass
class EmulatedPodExec:
    """Exec into the emulator's pods; ``scripted_cli`` replaces onyx-cli with an exit code."""

    emulator: KubeEmulator
    root: Path
    scripted_cli: ScriptedCli | None = None
    calls: list[tuple[str, str, tuple[str, ...]]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.local = LocalExec(self.root)
        self._uids: dict[tuple[str, str], str] = {}

    def _fresh_volumes(self, namespace: str, pod: str, uid: str) -> None:
        """A new pod of the same name starts with empty volumes, like an emptyDir."""
        if self._uids.get((namespace, pod)) not in (None, uid):
            shutil.rmtree(self.local.workspace(namespace, pod), ignore_errors=True)
            shutil.rmtree(self.local.credentials_dir(namespace, pod), ignore_errors=True)
        self._uids[(namespace, pod)] = uid

    def pod_env(self, namespace: str, pod: str) -> dict[str, str]:
        """The environment of the pod's sandbox container, Secrets resolved."""
        manifest = self.emulator.get("v1/pods", namespace, pod)
        env: dict[str, str] = {}
        for item in manifest["spec"]["containers"][0].get("env", []):
            if "value" in item:
                env[item["name"]] = item["value"]
                continue
            ref = item.get("valueFrom", {}).get("secretKeyRef")
            if ref:
                secret = self.emulator.get("v1/secrets", namespace, ref["name"])
                env[item["name"]] = base64.b64decode(secret["data"][ref["key"]]).decode()
        return env

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
        """Run ``argv`` as if inside ``namespace/pod``."""
        manifest = self.emulator.find("v1/pods", namespace, pod)
        if manifest is None or manifest.get("status", {}).get("phase") != "Running":
            raise ExecUnavailableError(f"pod {namespace}/{pod} is not running")
        self._fresh_volumes(namespace, pod, manifest["metadata"]["uid"])
        self.calls.append((namespace, pod, tuple(argv)))
        # The real transport opens a websocket with a GET upgrade, authorized as create on
        # Kubernetes 1.30+ and as get before: the operator needs both verbs.
        self.emulator.side_access += [("create", "", "pods/exec"), ("get", "", "pods/exec")]
        if tuple(argv) == DELIVER_ARGV or argv[3:4] == ["deliver-pat-and-skill"]:
            # The operator's one exec: write the PAT (and a claimed pod's SKILL.md) as the
            # script does, then onyx-cli.
            write = WRITE_PAT if tuple(argv) == DELIVER_ARGV else WRITE_PAT_AND_SKILL
            written = await self.local.run(
                namespace, pod, container, [*write, *argv[3:]], stdin=stdin
            )
            if written.exit_code != 0:
                code = written.exit_code if write is WRITE_PAT_AND_SKILL else EXIT_NOT_DELIVERED
                return ExecResult(code, written.stdout, written.stderr)
            argv = ["onyx-cli", "validate-config"]
        if argv and argv[0] == "onyx-cli":
            if self.scripted_cli is not None:
                code = self.scripted_cli(namespace, pod)
                # Exit 4 as onyx-cli says Onyx refused the PAT (not a firewall's refusal).
                said = b"Error: connection check failed: invalid personal access token.\n"
                return ExecResult(code, b"", said if code == 4 else b"")
            return await self._onyx_cli(namespace, pod, argv, limit=timeout)
        return await self.local.run(
            namespace,
            pod,
            container,
            argv,
            stdin=stdin,
            timeout=timeout,
            max_output_bytes=max_output_bytes,
        )

    def serve_exec_api(self) -> None:
        """Answer the emulator's exec API with this double (for an operator in a process)."""

        async def handle(
            namespace: str, pod: str, container: str, argv: list[str], stdin: bytes | None
        ) -> tuple[int, bytes, bytes]:
            result = await self.run(namespace, pod, container, argv, stdin=stdin)
            return result.exit_code, result.stdout, result.stderr

        self.emulator.exec_handler = handle

    async def _onyx_cli(
        self, namespace: str, pod: str, argv: Sequence[str], *, limit: float | None
    ) -> ExecResult:
        binary = shutil.which("onyx-cli") or str(Path(sys.executable).parent / "onyx-cli")
        # Through the sandbox image's wrapper, as in the pod: the PAT from the environment,
        # or else from the file the operator delivered into the pod.
        env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(self.root),
            "ONYX_CLI_REAL": binary,
            "ONYX_PAT_FILE": str(self.local.credentials_dir(namespace, pod) / "pat"),
            **self.pod_env(namespace, pod),
        }
        process = await asyncio.create_subprocess_exec(
            "/bin/sh",
            str(ONYX_CLI_WRAPPER),
            *argv[1:],
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(process.communicate(), limit)
        assert process.returncode is not None
        return ExecResult(process.returncode, out, err)


def mark_pod_running(
    emulator: KubeEmulator, namespace: str, name: str, *, ready: bool = True
) -> None:
    """Play the scheduler and the kubelet: the pod is bound to a node, running and (by
    default) Ready. Being bound, it is deleted gracefully (see :class:`KubeEmulator`)."""
    emulator.bind_pod(namespace, name)
    emulator.patch(
        "v1/pods",
        namespace,
        name,
        {
            "status": {
                "phase": "Running",
                "conditions": [
                    {"type": "PodScheduled", "status": "True"},
                    {"type": "Ready", "status": "True" if ready else "False"},
                ],
                "containerStatuses": [
                    {
                        "name": "sandbox",
                        "ready": ready,
                        "restartCount": 0,
                        "image": "craft-sandbox",
                        "imageID": "",
                        "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
                    }
                ],
            }
        },
        subresource="status",
    )


def mark_pod_failed(
    emulator: KubeEmulator, namespace: str, name: str, *, reason: str = "Error"
) -> None:
    """Play the kubelet: the pod's container exited (or it was evicted, with reason Evicted)."""
    emulator.bind_pod(namespace, name)  # it ran on a node
    emulator.patch(
        "v1/pods",
        namespace,
        name,
        {"status": {"phase": "Failed", "reason": reason, "message": f"the pod {reason.lower()}"}},
        subresource="status",
    )
