"""``craft-operator run`` loads the key ring before it starts: a bad ring, from the variable
or from its file, is one line and exit code 2 (like the other settings), naming the entry
by position and never echoing key material; a good one lets the start go on."""

from __future__ import annotations

import base64
import subprocess
import sys
from pathlib import Path

import pytest

from craft_operator.credentials import generate_key_entry

#: 32 raw bytes that are not UTF-8 (a key file put in the Secret as is).
RAW_KEY = b"\xc3\x28" + bytes(range(30))

SCRIPT = Path(sys.executable).with_name("craft-operator")
#: A key as ``secrets.token_urlsafe(32)`` writes it: also a well-formed key id.
CANARY = base64.urlsafe_b64encode(b"run-canary-key-material-32bytes!").decode().rstrip("=")
CANARY_FORMS = (CANARY, CANARY[:16], CANARY[-16:])


def run_operator(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """``craft-operator run`` with a clean environment plus ``env`` and no cluster."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    environment = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "KUBECONFIG": str(tmp_path / "no-kubeconfig"),
        **env,
    }
    return subprocess.run(
        [str(SCRIPT), "run"],
        capture_output=True,
        text=True,
        env=environment,
        timeout=120,
        check=False,
    )


def only_line(completed: subprocess.CompletedProcess[str]) -> str:
    """The one stderr line of a run that stopped at start."""
    assert "Traceback" not in completed.stderr
    lines = completed.stderr.splitlines()
    assert len(lines) == 1, completed.stderr
    assert completed.stdout == ""
    return lines[0]


def assert_no_key_material(text: str) -> None:
    assert not [form for form in CANARY_FORMS if form in text]


@pytest.mark.parametrize(
    "ring",
    [f"{CANARY}:k1", f"{generate_key_entry('k1').get_secret_value()}\n{CANARY}:k2"],
    ids=["first entry", "second entry"],
)
def test_a_key_ring_file_written_the_wrong_way_round_stops_the_start_without_the_key(
    tmp_path: Path, ring: str
) -> None:
    path = tmp_path / "keys"
    path.write_text(ring + "\n", encoding="utf-8")

    completed = run_operator(tmp_path, CRAFT_ENCRYPTION_KEYS_FILE=str(path))

    assert completed.returncode == 2
    line = only_line(completed)
    assert line.startswith(f"craft-operator: key ring file {path}: key ring entry ")
    assert "the key is 1 bytes long" in line
    assert_no_key_material(completed.stdout + completed.stderr)


def test_a_key_ring_variable_written_the_wrong_way_round_stops_the_start_without_the_key(
    tmp_path: Path,
) -> None:
    completed = run_operator(tmp_path, CRAFT_ENCRYPTION_KEYS=f"{CANARY}:k1")

    assert completed.returncode == 2
    assert "CRAFT_ENCRYPTION_KEYS" in only_line(completed)
    assert_no_key_material(completed.stdout + completed.stderr)


def test_an_unreadable_key_ring_file_stops_the_start_naming_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-keys"

    completed = run_operator(tmp_path, CRAFT_ENCRYPTION_KEYS_FILE=str(missing))

    assert completed.returncode == 2
    assert only_line(completed) == (
        f"craft-operator: cannot read the key ring file {missing}: No such file or directory"
    )


def test_a_raw_key_as_the_key_ring_file_stops_the_start_in_one_line(tmp_path: Path) -> None:
    """kubectl create secret ... --from-file=keys=key.bin: bytes, not entries."""
    path = tmp_path / "keys"
    path.write_bytes(RAW_KEY)

    completed = run_operator(tmp_path, CRAFT_ENCRYPTION_KEYS_FILE=str(path))

    assert completed.returncode == 2
    assert only_line(completed).startswith(f"craft-operator: key ring file {path} is not text")


def test_a_good_key_ring_file_lets_the_start_go_on_to_the_cluster(tmp_path: Path) -> None:
    path = tmp_path / "keys"
    path.write_text(generate_key_entry("k1").get_secret_value() + "\n", encoding="utf-8")

    completed = run_operator(tmp_path, CRAFT_ENCRYPTION_KEYS_FILE=str(path))

    assert completed.returncode == 1
    assert "no Kubernetes credentials found" in only_line(completed)
