"""What is wrong with a YAML document, said without quoting it.

PyYAML's own messages quote the lines around the problem, which in a kubeconfig may hold a
token or a key: a message for people or logs says what and where (line, column) only.
"""

from __future__ import annotations

import yaml
from yaml.reader import ReaderError


def yaml_problem(exc: yaml.YAMLError) -> str:
    """What is wrong and where, never PyYAML's own message (see the module docstring)."""
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        return f"{exc.problem or 'a syntax error'}{where}"
    if isinstance(exc, ReaderError):  # not UTF-8 (or UTF-16), or a control character
        return f"{exc.reason} at character {exc.position}"
    return type(exc).__name__
