"""Background processes are stopped by pid, and only while the pid is still theirs."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path

from craft_operator.devtools import processes
from craft_operator.devtools.processes import Recorded

SLEEP = shutil.which("sleep") or "/bin/sleep"


def test_a_started_process_is_recorded_running_and_stopped(tmp_path: Path) -> None:
    child = processes.start(tmp_path, "sleeper", [SLEEP, "60"])
    [record] = processes.recorded(tmp_path)
    assert (record.name, record.pid) == ("sleeper", child.pid)
    assert processes.is_running(record)

    assert processes.stop_all(tmp_path) == ["sleeper"]
    child.wait(5)
    assert not processes.is_running(record)
    assert processes.recorded(tmp_path) == []


def test_output_goes_to_the_processes_log(tmp_path: Path) -> None:
    child = processes.start(tmp_path, "talker", [shutil.which("sh") or "/bin/sh", "-c", "echo hi"])
    child.wait(5)
    assert (tmp_path / "logs" / "talker.log").read_text() == "hi\n"


def left_alone_when_recorded_as(tmp_path: Path, record: Callable[[int, Recorded], str]) -> bool:
    """Whether a running sleeper whose pid file is rewritten as ``record(pid, as_written)``
    says survives ``stop_all``."""
    child = processes.start(tmp_path, "sleeper", [SLEEP, "60"])
    try:
        [written] = processes.recorded(tmp_path)
        (tmp_path / "pids" / "sleeper.pid").write_text(record(child.pid, written))
        stopped = processes.stop_all(tmp_path)
        time.sleep(0.1)
        return stopped == [] and child.poll() is None
    finally:
        child.kill()
        child.wait(5)


def test_a_pid_now_running_another_program_is_left_alone(tmp_path: Path) -> None:
    assert left_alone_when_recorded_as(tmp_path, lambda pid, _: f"{pid}\n/usr/bin/not-sleep\n")


def test_a_pid_reused_by_the_same_program_started_later_is_left_alone(tmp_path: Path) -> None:
    # After a reboot the recorded pid may run the same executable (another Python, say).
    def started_earlier(pid: int, written: Recorded) -> str:
        assert written.started is not None
        return f"{pid}\n{written.executable}\n{written.started - 1}\n"

    assert left_alone_when_recorded_as(tmp_path, started_earlier)


def test_a_pid_file_from_before_start_times_still_stops_its_process(tmp_path: Path) -> None:
    child = processes.start(tmp_path, "sleeper", [SLEEP, "60"])
    [record] = processes.recorded(tmp_path)
    (tmp_path / "pids" / "sleeper.pid").write_text(f"{child.pid}\n{record.executable}\n")
    assert processes.stop_all(tmp_path) == ["sleeper"]
    assert child.wait(5) != 0


def test_a_process_that_ignores_sigterm_is_killed_after_the_grace(tmp_path: Path) -> None:
    sh = shutil.which("sh") or "/bin/sh"
    child = processes.start(tmp_path, "stubborn", [sh, "-c", "trap '' TERM; sleep 60"])
    time.sleep(0.2)  # let the shell install its trap
    assert processes.stop_all(tmp_path, grace=0.5) == ["stubborn"]
    assert child.wait(5) != 0


def test_groups_named_first_are_stopped_first_in_order(tmp_path: Path) -> None:
    for name in ("server", "client", "storage"):
        processes.start(tmp_path, name, [SLEEP, "60"])
    stopped = processes.stop_all(tmp_path, first=(["client"], ["server"]))
    assert stopped == ["client", "server", "storage"]


def test_stopping_some_processes_by_name_leaves_the_others_running(tmp_path: Path) -> None:
    for name in ("server", "client"):
        processes.start(tmp_path, name, [SLEEP, "60"])
    assert processes.stop(tmp_path, ["server"]) == ["server"]
    [left] = processes.recorded(tmp_path)
    assert left.name == "client"
    assert processes.is_running(left)
    assert processes.stop_all(tmp_path) == ["client"]
