"""Searching for leaked secrets: the forms a secret could take, and where to look.

A PAT or an encryption key must appear nowhere but in the credentials Secret (and the
database, encrypted). :func:`search_for_leaks` looks through what a run left behind in the
emulator (every version of every object, every request body) and any logs, metrics pages
and other texts a test collected.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
from collections.abc import Iterable, Mapping
from pathlib import Path

from craft_operator.builders.naming import SECRET_SUFFIX
from tests.support.emulator import KubeEmulator


def secret_tokens(emulator: KubeEmulator) -> set[str]:
    """Every PAT any credentials Secret has ever held (all versions of all of them)."""
    tokens: set[str] = set()
    for (resource, _namespace, name), obj in emulator.objects.items():
        if resource.plural != "secrets" or not name.endswith(SECRET_SUFFIX):
            continue
        for version in obj.history:
            for value in ((version.raw if version else None) or {}).get("data", {}).values():
                tokens.add(base64.b64decode(value).decode())
    return tokens


def secret_forms(secret: str) -> set[str]:
    """Ways a secret could leak: as is, base64 (both alphabets), and its random middle."""
    raw = secret.encode()
    forms = {
        secret,
        base64.b64encode(raw).decode(),
        base64.urlsafe_b64encode(raw).decode(),
    }
    if len(secret) > 24:
        forms.add(secret[12:-4])
    return forms


def key_forms(entry: str) -> set[str]:
    """Ways an ``id:base64key`` encryption key could leak (the id alone is not secret)."""
    _, _, encoded = entry.partition(":")
    material = base64.b64decode(encoded)
    return {
        encoded,
        encoded.rstrip("="),
        base64.urlsafe_b64encode(material).decode().rstrip("="),
        binascii.hexlify(material).decode(),
    }


@dataclasses.dataclass
class LeakReport:
    """Where the canaries were searched, and what was found."""

    searched: dict[str, int] = dataclasses.field(default_factory=dict)
    hits: list[str] = dataclasses.field(default_factory=list)

    def search(self, where: str, text: str, canaries: set[str]) -> None:
        """Search ``text`` (from ``where``) for every canary."""
        self.searched[where.split(":")[0]] = self.searched.get(where.split(":")[0], 0) + 1
        for canary in canaries:
            if canary in text:
                self.hits.append(f"{where} ({len(canary)}-character form)")


def search_for_leaks(
    emulator: KubeEmulator,
    canaries: set[str],
    *,
    logs: Iterable[Path] = (),
    metrics: Iterable[str] = (),
    texts: Mapping[str, str] | None = None,
) -> LeakReport:
    """Search every stored object version but the credentials Secrets, every event, status,
    log line (tracebacks included), metrics page and extra text for any canary."""
    report = LeakReport()
    for (resource, namespace, name), obj in emulator.objects.items():
        if resource.plural == "secrets" and name.endswith(SECRET_SUFFIX):
            continue
        for version in obj.history:
            text = json.dumps(version.raw) if version is not None else ""
            report.search(f"{resource.plural}:{namespace}/{name}", text, canaries)
    for request in emulator.served:  # what the operator sent, including refused writes
        path = str(request.url.path)
        if request.data is not None and "/secrets" not in path:  # a Secret write carries a PAT
            report.search(f"requests:{path}", json.dumps(request.data), canaries)
    for path in logs:
        report.search(f"logs:{path.name}", path.read_text(errors="replace"), canaries)
    for index, page in enumerate(metrics):
        report.search(f"metrics:page {index}", page, canaries)
    for where, text in (texts or {}).items():
        report.search(where, text, canaries)
    return report
