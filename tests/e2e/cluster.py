"""Drive a kind cluster from the e2e tests: kind, kubectl and docker as subprocesses.

Every command runs with a timeout and fails with the command line, its exit code and its
stderr; every wait names what it waited for and shows the last thing it saw. Secrets
(the PAT) travel on stdin, never on a command line.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

REPO = Path(__file__).resolve().parents[2]
SKIP_NO_DOCKER = "e2e: no Docker engine here (docker info failed); run make e2e where Docker runs"
T = TypeVar("T")


class CommandError(AssertionError):
    """A command failed; the message has the command, exit code and stderr."""


def skip_reason() -> str | None:
    """Why the e2e suite cannot run here, in one line, or None when it can."""
    if shutil.which("docker") is None:
        return SKIP_NO_DOCKER
    try:
        info = subprocess.run(["docker", "info"], capture_output=True, timeout=30, check=False)
    except subprocess.TimeoutExpired:
        return SKIP_NO_DOCKER
    if info.returncode != 0:
        return SKIP_NO_DOCKER
    for tool in ("kind", "kubectl"):
        if shutil.which(tool) is None:
            return f"e2e: {tool} is not installed; install it to run make e2e"
    return None


def run(
    argv: Sequence[str],
    *,
    stdin: bytes | None = None,
    timeout: float = 120,
    check: bool = True,
    cwd: Path = REPO,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """Run ``argv``; on failure (``check``) raise :class:`CommandError` saying what failed."""
    try:
        result = subprocess.run(
            list(argv),
            input=stdin,
            capture_output=True,
            timeout=timeout,
            cwd=cwd,
            env=dict(env) if env is not None else None,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise CommandError(f"timed out after {timeout:.0f}s: {' '.join(argv)}") from None
    if check and result.returncode != 0:
        stderr = result.stderr.decode(errors="replace").strip()[-4000:]
        raise CommandError(f"exit {result.returncode}: {' '.join(argv)}\n{stderr}")
    return result


def wait_for(
    probe: Callable[[], T | None],
    *,
    what: str,
    timeout: float,
    interval: float = 2.0,
    diagnose: Callable[[], str] | None = None,
) -> T:
    """Call ``probe`` until it returns something other than None (or raises no CommandError).

    On timeout, fail naming ``what``, the last error seen and ``diagnose()``'s output.
    """
    deadline = time.monotonic() + timeout
    last = "nothing yet"
    while True:
        try:
            value = probe()
        except CommandError as exc:
            value, last = None, str(exc)
        else:
            if value is not None:
                return value
        if time.monotonic() >= deadline:
            details = diagnose() if diagnose is not None else ""
            raise AssertionError(
                f"timed out after {timeout:.0f}s waiting for {what}; last: {last}\n{details}"
            )
        time.sleep(interval)


@dataclass(frozen=True)
class Kind:
    """One kind cluster, addressed by name (kubectl uses the context ``kind-<name>``)."""

    name: str

    @property
    def context(self) -> str:
        """The kubeconfig context kind writes for this cluster."""
        return f"kind-{self.name}"

    def exists(self) -> bool:
        """Whether kind knows a cluster of this name."""
        names = run(["kind", "get", "clusters"]).stdout.decode().split()
        return self.name in names

    def create(self, node_image: str | None = None) -> None:
        """Create the cluster and wait for its control plane."""
        argv = ["kind", "create", "cluster", "--name", self.name, "--wait", "180s"]
        if node_image:
            argv += ["--image", node_image]
        run(argv, timeout=600)

    def delete(self) -> None:
        """Delete the cluster (and its kubeconfig context)."""
        run(["kind", "delete", "cluster", "--name", self.name], timeout=300, check=False)

    def load_image(self, image: str) -> None:
        """Copy a local Docker image onto the cluster's nodes."""
        run(["kind", "load", "docker-image", image, "--name", self.name], timeout=600)

    def kubectl(
        self, *args: str, stdin: bytes | None = None, timeout: float = 120, check: bool = True
    ) -> subprocess.CompletedProcess[bytes]:
        """``kubectl --context kind-<name> ...``."""
        return run(
            ["kubectl", "--context", self.context, *args],
            stdin=stdin,
            timeout=timeout,
            check=check,
        )

    def text(self, *args: str, timeout: float = 60) -> str:
        """The stdout of a kubectl command, decoded and stripped."""
        return self.kubectl(*args, timeout=timeout).stdout.decode().strip()


def build_image(tag: str, context: Path, dockerfile: Path | None = None) -> None:
    """``docker build`` with BuildKit (the operator Dockerfile mounts its build stage)."""
    argv = ["docker", "build", "-t", tag]
    if dockerfile is not None:
        argv += ["-f", str(dockerfile)]
    run([*argv, str(context)], timeout=1200, env={**os.environ, "DOCKER_BUILDKIT": "1"})
