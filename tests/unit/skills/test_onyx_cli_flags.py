"""Every flag the skill tells the agent to use exists in the pinned onyx-cli."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import metadata
from pathlib import Path

import pytest

from craft_operator.api.models import Source
from craft_operator.skills import render_skill
from tests.unit.skills.structure import documented_flags

pytestmark = pytest.mark.unit

PINNED_VERSION = "1.4.4"
_HELP_FLAG = re.compile(r"^\s+(?:-\w, )?(--[a-z][a-z0-9-]*)", re.MULTILINE)


def onyx_cli() -> str:
    """The onyx-cli executable installed by the ``test`` extra, next to this Python."""
    try:
        version = metadata.version("onyx-cli")
    except metadata.PackageNotFoundError:
        pytest.fail("onyx-cli is not installed: pip install -e '.[test]' (pins onyx-cli==1.4.4)")
    assert version == PINNED_VERSION, f"onyx-cli {version} installed, the skill targets 1.4.4"
    beside = Path(sys.executable).with_name("onyx-cli")
    found = str(beside) if beside.exists() else shutil.which("onyx-cli")
    assert found, "the onyx-cli package is installed but its executable is not on PATH"
    return found


def run_onyx_cli(home: Path, *args: str, **env: str) -> str:
    """Run the pinned onyx-cli with a bare environment (``home`` as its HOME, so no Onyx
    configuration of this machine's is read, and ``env`` added); its output, once it has
    exited 0."""
    bare = {"PATH": os.environ.get("PATH", ""), "HOME": str(home), **env}
    result = subprocess.run(
        [onyx_cli(), *args], capture_output=True, text=True, env=bare, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.fixture(scope="module")
def search_help(tmp_path_factory: pytest.TempPathFactory) -> str:
    """``onyx-cli search --help`` of the pinned CLI, run without any Onyx configuration."""
    return run_onyx_cli(tmp_path_factory.mktemp("home"), "search", "--help")


def cli_flags(help_text: str) -> set[str]:
    return set(_HELP_FLAG.findall(help_text))


def test_the_help_text_is_parsed_into_flags(search_help: str) -> None:
    # Guards the parser: if it found nothing, the real check below could not fail.
    assert {"--source", "--days", "--no-query-expansion", "--help"} <= cli_flags(search_help)


@pytest.mark.parametrize(
    "sources",
    [[], [Source(name="slack"), Source(name="confluence")]],
    ids=["no sources", "two sources"],
)
def test_every_flag_the_skill_documents_exists_in_the_pinned_cli(
    search_help: str, sources: list[Source]
) -> None:
    documented = documented_flags(render_skill(sources).text)
    assert {"--source", "--days", "--no-query-expansion"} <= documented
    missing = documented - cli_flags(search_help)
    assert not missing, f"SKILL.md documents flags onyx-cli {PINNED_VERSION} lacks: {missing}"


def test_the_skill_documents_the_output_fields_the_cli_prints(search_help: str) -> None:
    text = render_skill([Source(name="slack")]).text
    for field in re.findall(r"\{title, url, source_type, content, updated_at\}", search_help):
        for name in field.strip("{}").split(", "):
            assert f'"{name}"' in text
    assert "{title, url, source_type, content, updated_at}" in search_help


class _OneQueryRefused(BaseHTTPRequestHandler):
    """An Onyx search API that rate-limits the query ``refused`` and finds nothing else."""

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        if "refused" in (body.get("query"), body.get("search_query")):
            self.send_response(429)
            self.end_headers()
            self.wfile.write(b"slow down")
            return
        answer = json.dumps({"results": [], "llm_facing_text": "", "citation_mapping": {}})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(answer.encode())


@pytest.fixture
def onyx_api() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _OneQueryRefused)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_batch_with_one_failed_query_exits_0_and_the_skill_says_how_to_read_it(
    onyx_api: str, tmp_path: Path
) -> None:
    output = run_onyx_cli(
        tmp_path,
        "search",
        "found",
        "refused",
        ONYX_SERVER_URL=onyx_api,
        ONYX_PAT="onyx_pat_" + "x" * 32,
    )
    searches = {entry["query"]: entry for entry in json.loads(output)["searches"]}
    assert searches["found"]["results"] == []
    assert searches["refused"]["results"] is None
    assert "429" in searches["refused"]["error"]
    text = render_skill([Source(name="slack")]).text
    assert 'has an `error` and `"results": null`' in text
    assert "(the exit status is then 0)" in text.replace("\n", " ")


class _Answering(BaseHTTPRequestHandler):
    """An Onyx API that answers every request with the class's ``status``."""

    status = 401

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        self.send_response(self.status)
        self.end_headers()
        self.wfile.write(b"no")


def exit_status_of_a_search(home: Path, server_url: str) -> int:
    """How the pinned onyx-cli exits from one search against ``server_url``."""
    bare = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(home),
        "ONYX_SERVER_URL": server_url,
        "ONYX_PAT": "onyx_pat_" + "x" * 32,
    }
    result = subprocess.run(
        [onyx_cli(), "search", "on-call rotation"],
        capture_output=True,
        text=True,
        env=bare,
        timeout=60,
        check=False,
    )
    return result.returncode


@pytest.mark.parametrize(
    ("answer", "said"),
    [(401, "the credentials were refused"), (429, "rate limited"), (None, "server is unreachable")],
    ids=["refused", "rate limited", "unreachable"],
)
def test_the_exit_statuses_the_skill_explains_are_the_pinned_clis(
    tmp_path: Path, answer: int | None, said: str
) -> None:
    """The agent tells the user what failed from these: a wrong number misleads it."""
    text = " ".join(render_skill([Source(name="slack")]).text.split())
    explained = {
        meaning.strip(): int(code)
        for code, meaning in re.findall(r"(?:exit )?(\d+): ([a-z ]+)", text)
    }
    code = next(code for meaning, code in explained.items() if said in meaning)
    if answer is None:
        with socket.socket() as probe:  # a port nothing listens on
            probe.bind(("127.0.0.1", 0))
            url = f"http://127.0.0.1:{probe.getsockname()[1]}"
        assert exit_status_of_a_search(tmp_path, url) == code
        return
    _Answering.status = answer
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Answering)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        assert exit_status_of_a_search(tmp_path, url) == code
    finally:
        server.shutdown()
        server.server_close()
