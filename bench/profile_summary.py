"""Summarise a py-spy profile of the operator (``BENCH_PROFILE=<file>``, raw format).

Prints where the operator's samples went: by area (the first frame, from the leaf up, that
belongs to a known area: the operator's own modules by room, kopf, aiohttp, json, the
database, ...), and the functions with the most samples of their own.

    .venv/bin/python bench/profile_summary.py /tmp/profile.txt [--top 25]
"""

from __future__ import annotations

import argparse
import collections
import re
from pathlib import Path

#: Areas by the file a frame is in, tried in order on each frame from the leaf up.
AREAS = (
    ("json (decoding and encoding)", re.compile(r"\bjson/")),
    ("ssl and sockets", re.compile(r"\bssl\.py|asyncio/(selector_events|sslproto)")),
    ("aiohttp (HTTP and websockets)", re.compile(r"\baiohttp/")),
    ("SQLAlchemy (credential database)", re.compile(r"\bsqlalchemy/")),
    ("cryptography (PAT sealing)", re.compile(r"\bcryptography/")),
    ("pydantic (parsing sandboxes)", re.compile(r"\bpydantic")),
    ("logging", re.compile(r"\blogging/")),
    ("prometheus_client", re.compile(r"\bprometheus_client/")),
    ("craft_operator.kube (client, cache, events)", re.compile(r"craft_operator/kube/")),
    ("craft_operator.reconciler", re.compile(r"craft_operator/reconciler/")),
    ("craft_operator.handlers", re.compile(r"craft_operator/handlers/")),
    ("craft_operator (other)", re.compile(r"craft_operator/")),
    ("kopf (watching and dispatch)", re.compile(r"\bkopf/")),
    ("asyncio (event loop)", re.compile(r"\basyncio/")),
)
FRAME = re.compile(r"^(?P<function>.*) \((?P<file>[^():]+)(:\d+)?\)$")


def area_of(frames: list[str]) -> str:
    """The area of a stack: the first known area from the leaf up."""
    for frame in reversed(frames):
        for name, pattern in AREAS:
            if pattern.search(frame):
                return name
    return "other (interpreter, idle)"


def summarise(path: Path, top: int) -> list[str]:
    """The printed lines for a raw py-spy profile."""
    by_area: collections.Counter[str] = collections.Counter()
    by_function: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack.split(";")
        total += count
        by_area[area_of(frames)] += count
        match = FRAME.match(frames[-1])
        by_function[
            match.group("function") + " " + match.group("file") if match else frames[-1]
        ] += count
    lines = [f"{total} samples; by area (the innermost known frame):"]
    lines += [f"  {100 * n / total:5.1f}%  {name}" for name, n in by_area.most_common()]
    lines.append(f"the {top} functions with the most samples of their own:")
    lines += [f"  {100 * n / total:5.1f}%  {name}" for name, n in by_function.most_common(top)]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile", type=Path, help="py-spy's raw output (BENCH_PROFILE)")
    parser.add_argument("--top", type=int, default=25, help="functions to list")
    args = parser.parse_args()
    for line in summarise(args.profile, args.top):
        print(line)


if __name__ == "__main__":
    main()
