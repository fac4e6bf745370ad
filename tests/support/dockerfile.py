"""A small Dockerfile reader for tests: instructions, stages and exec-form arguments.

Handles what our Dockerfiles use: comments, parser directives, backslash line
continuations, ``ARG`` defaults substituted into ``FROM``, and JSON (exec) form. It is not
a full BuildKit parser; a construct it does not understand raises ``ValueError`` so a test
never passes by misreading.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Instruction:
    """One instruction: its keyword (upper case) and the rest of the logical line."""

    keyword: str
    value: str

    def exec_form(self) -> list[str]:
        """The JSON array of ``CMD``/``ENTRYPOINT``/``RUN`` in exec form."""
        parsed = json.loads(self.value)
        if not (isinstance(parsed, list) and all(isinstance(item, str) for item in parsed)):
            raise ValueError(f"{self.keyword} is not in exec form: {self.value}")
        return parsed


@dataclass
class Stage:
    """One build stage: its base image, optional name and instructions."""

    base: str
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[Instruction]:
        """Every instruction with ``keyword``, in order."""
        return [item for item in self.instructions if item.keyword == keyword.upper()]

    def last(self, keyword: str) -> Instruction | None:
        """The last instruction with ``keyword`` (the one that takes effect), or None."""
        found = self.all(keyword)
        return found[-1] if found else None

    def run_text(self) -> str:
        """Every RUN command of the stage, joined: what the stage executes at build time."""
        return "\n".join(item.value for item in self.all("RUN"))


def logical_lines(text: str) -> list[str]:
    """The Dockerfile's instructions as single lines (comments dropped, continuations joined)."""
    lines: list[str] = []
    pending = ""
    for raw in text.splitlines():
        stripped = raw.strip()
        if stripped.startswith("#") or (not stripped and not pending):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        lines.append((pending + stripped).strip())
        pending = ""
    if pending:
        raise ValueError("the Dockerfile ends inside a line continuation")
    return lines


def parse_dockerfile(path: Path) -> list[Stage]:
    """The stages of the Dockerfile at ``path``, with ``ARG`` defaults applied to ``FROM``."""
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in logical_lines(path.read_text(encoding="utf-8")):
        keyword, _, value = line.partition(" ")
        keyword, value = keyword.upper(), value.strip()
        if keyword == "ARG" and not stages:
            name, _, default = value.partition("=")
            args[name] = default
        elif keyword == "FROM":
            words = shlex.split(
                re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args[m.group(1) or m.group(2)], value)
            )
            words = [word for word in words if not word.startswith("--")]
            if len(words) == 3 and words[1].upper() == "AS":
                stages.append(Stage(base=words[0], name=words[2]))
            elif len(words) == 1:
                stages.append(Stage(base=words[0], name=None))
            else:
                raise ValueError(f"cannot read FROM {value}")
        elif not stages:
            raise ValueError(f"{keyword} before the first FROM")
        else:
            stages[-1].instructions.append(Instruction(keyword, value))
    if not stages:
        raise ValueError(f"{path} has no FROM")
    return stages
