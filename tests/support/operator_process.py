"""``craft-operator run`` as a real process, as in production: its own logs, metrics and exit.

A crash is a real ``SIGKILL`` (nothing in flight finishes, no ``finally`` runs). The
resilience suite runs it against the emulator, the cluster tier against the real control
plane (with the ServiceAccount's kubeconfig), the benchmarks against either.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

from tests.support.s3 import free_port


def kubeconfig(path: Path, url: str) -> Path:
    """A kubeconfig that points at the emulator."""
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters: [{{name: emulator, cluster: {{server: '{url}'}}}}]\n"
        "contexts: [{name: emulator, context: {cluster: emulator, user: operator}}]\n"
        "current-context: emulator\n"
        "users: [{name: operator, user: {token: operator}}]\n"
    )
    return path


@dataclasses.dataclass
class OperatorProcess:
    """``craft-operator run`` in its own process, started again after every kill."""

    url: str
    state: Path
    #: The namespace it serves (``-n``); ``None``: all namespaces (``-A``).
    namespace: str | None
    env: Mapping[str, str]
    #: A kubeconfig to use instead of one with a fixed token for ``url`` (the emulator's).
    kubeconfig_path: Path | None = None
    #: How the process runs besides ``-n namespace``: standalone, or a peering replica.
    run_args: Sequence[str] = ("--standalone",)
    generation: int = 0
    child: subprocess.Popen[bytes] | None = None
    metrics: list[str] = dataclasses.field(default_factory=list)
    exits: list[int] = dataclasses.field(default_factory=list)
    _metrics_port: int = 0

    @property
    def logs(self) -> list[Path]:
        """Every log file written so far, one per process started."""
        return sorted((self.state / "logs").glob("operator-*.log"))

    def start(self) -> None:
        """Start a new operator process (the previous one must be gone)."""
        assert self.child is None or self.child.poll() is not None, "still running"
        self.generation += 1
        self._metrics_port = free_port()
        (self.state / "logs").mkdir(parents=True, exist_ok=True)
        log = self.state / "logs" / f"operator-{self.generation:03d}.log"
        environment = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(self.state),
            "KUBECONFIG": str(
                self.kubeconfig_path or kubeconfig(self.state / "kubeconfig", self.url)
            ),
            "CRAFT_STATE_DIR": str(self.state),
            "CRAFT_METRICS_PORT": str(self._metrics_port),
            # The code under test, when the tests run another checkout's (a worktree's).
            **({"PYTHONPATH": os.environ["PYTHONPATH"]} if "PYTHONPATH" in os.environ else {}),
            **self.env,
        }
        binary = Path(sys.executable).parent / "craft-operator"
        with log.open("ab") as output:
            self.child = subprocess.Popen(
                [
                    str(binary),
                    "run",
                    *self.run_args,
                    *(("-n", self.namespace) if self.namespace is not None else ("-A",)),
                ],
                env=environment,
                stdout=output,
                stderr=subprocess.STDOUT,
            )

    @property
    def alive(self) -> bool:
        """Whether the current process is running."""
        return self.child is not None and self.child.poll() is None

    def kill(self) -> None:
        """``SIGKILL``: the process ends wherever it is."""
        if self.child is None:
            return
        self.scrape_metrics()
        self.child.kill()
        self.exits.append(self.child.wait())

    def terminate(self) -> int:
        """``SIGTERM`` as Kubernetes sends it, and wait; the exit code (0 when clean)."""
        assert self.child is not None
        self.scrape_metrics()
        self.child.send_signal(signal.SIGTERM)
        try:
            code = self.child.wait(60)
        except subprocess.TimeoutExpired:
            self.child.kill()
            code = self.child.wait()
        self.exits.append(code)
        return code

    async def stop(self) -> int:
        """:meth:`terminate` without blocking the event loop."""
        return await asyncio.to_thread(self.terminate)

    async def stop_cleanly(self, *, within: float = 60.0) -> None:
        """Once the process serves (a ``SIGTERM`` during its imports just kills it), scrape
        the metrics one last time, ``SIGTERM``, and fail unless it exits with 0."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        pages = len(self.metrics)
        while self.alive and len(self.metrics) == pages and loop.time() < deadline:
            await asyncio.to_thread(self.scrape_metrics)
            await asyncio.sleep(0.2)
        code = await self.stop()
        assert code == 0, f"the operator exited with {code} on SIGTERM; its log ends:\n" + (
            self.log_tail()
        )

    def scrape_metrics(self) -> None:
        """Keep what the process's metrics endpoint serves now (if it answers)."""
        if not self.alive:
            return
        with contextlib.suppress(OSError):
            url = f"http://127.0.0.1:{self._metrics_port}/metrics"
            with urllib.request.urlopen(url, timeout=5) as response:
                self.metrics.append(response.read().decode("utf-8", errors="replace"))

    def log_tail(self, lines: int = 60) -> str:
        """The end of the latest log, for a failure message."""
        if not self.logs:
            return "(no log)"
        text = self.logs[-1].read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])
