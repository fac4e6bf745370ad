"""Background processes that outlive the command that started them, stopped by pid.

Each process gets a log file and a pid file in a state directory. The pid file also holds
the executable's path and the process's start time, so that a pid the kernel has since
given to another program (after a reboot, say: another Python for the Onyx API's) is never
signalled.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Recorded:
    """A process named in a pid file."""

    name: str
    pid: int
    executable: str
    #: Clock ticks after boot at which it started (``/proc/<pid>/stat``); None in pid files
    #: written before it was recorded.
    started: int | None = None


def _pid_dir(state: Path) -> Path:
    return state / "pids"


def start(
    state: Path,
    name: str,
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` in a session of its own, logging to ``state/logs/<name>.log``."""
    (state / "logs").mkdir(parents=True, exist_ok=True)
    _pid_dir(state).mkdir(parents=True, exist_ok=True)
    with (state / "logs" / f"{name}.log").open("ab") as log:
        child = subprocess.Popen(  # noqa: S603 (argv is built by the caller, no shell)
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            start_new_session=True,
        )
    _write_record(_pid_dir(state) / f"{name}.pid", child.pid, os.path.realpath(argv[0]))
    return child


def _write_record(path: Path, pid: int, executable: str) -> None:
    """Record process ``pid`` at ``path`` as :func:`_read_records` reads it: its pid, its
    executable and its start time."""
    started = _start_time(pid)
    path.write_text(f"{pid}\n{executable}\n{'' if started is None else started}\n")


def _self_dir(state: Path) -> Path:
    # Apart from the pid files: stop_all() stops those by process group, and a process
    # recorded by itself (make run's operator) leads none, and is stopped with Ctrl-C.
    return state / "selves"


def record_self(state: Path, name: str) -> None:
    """Record this process under ``name`` (for :func:`recorded_selves`): its pid and start
    time, which an ``exec`` keeps, and its interpreter."""
    _self_dir(state).mkdir(parents=True, exist_ok=True)
    pid = os.getpid()
    _write_record(_self_dir(state) / f"{name}.pid", pid, os.readlink(f"/proc/{pid}/exe"))


def recorded_selves(state: Path) -> list[Recorded]:
    """The processes that recorded themselves with :func:`record_self`."""
    return _read_records(_self_dir(state))


def _start_time(pid: int) -> int | None:
    """When process ``pid`` started, in clock ticks after boot; None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: fields after its last ")".
    fields = stat[stat.rindex(")") + 2 :].split()
    return int(fields[19])  # field 22 of the whole line


def recorded(state: Path) -> list[Recorded]:
    """Every process the state directory has a pid file for."""
    return _read_records(_pid_dir(state))


def _read_records(directory: Path) -> list[Recorded]:
    found: list[Recorded] = []
    for path in sorted(directory.glob("*.pid")):
        lines = path.read_text().splitlines()
        if len(lines) >= 2 and lines[0].isdigit():
            started = int(lines[2]) if len(lines) >= 3 and lines[2].isdigit() else None
            found.append(Recorded(path.stem, int(lines[0]), lines[1], started))
    return found


def is_running(process: Recorded) -> bool:
    """True while the recorded pid is alive, still runs the recorded executable, and (when
    the pid file says) started when it did."""
    try:
        executable = os.readlink(f"/proc/{process.pid}/exe")
    except OSError:
        return False
    # A binary replaced on disk since it started reads as "<path> (deleted)".
    if executable.removesuffix(" (deleted)") != process.executable:
        return False
    return process.started is None or _start_time(process.pid) == process.started


def stop_all(state: Path, *, grace: float = 10.0, first: Sequence[Sequence[str]] = ()) -> list[str]:
    """Stop every recorded process (SIGTERM, then SIGKILL after ``grace`` s); their names.

    ``first`` lists groups of names to stop, group after group, before all the rest (a
    server's clients before the server, so that it has nothing left to drain).
    """
    stopped: list[str] = []
    for group in first:
        stopped += _stop([p for p in recorded(state) if p.name in group], grace)
    stopped += _stop(recorded(state), grace)
    for path in _pid_dir(state).glob("*.pid"):
        path.unlink()
    return stopped


def stop(state: Path, names: Collection[str], *, grace: float = 10.0) -> list[str]:
    """Stop only the recorded processes named ``names``, as :func:`stop_all` stops them;
    their pid files go, the others' stay. The names of those that were running."""
    stopped = _stop([p for p in recorded(state) if p.name in names], grace)
    for name in names:
        (_pid_dir(state) / f"{name}.pid").unlink(missing_ok=True)
    return stopped


def _stop(candidates: list[Recorded], grace: float) -> list[str]:
    processes = [process for process in candidates if is_running(process)]
    for process in processes:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while any(is_running(process) for process in processes) and time.monotonic() < deadline:
        time.sleep(0.1)
    for process in processes:
        if is_running(process):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
    while any(is_running(process) for process in processes):
        time.sleep(0.05)
    return [process.name for process in processes]
