"""How long rendering SKILL.md takes, and how large it gets, for typical and worst-case specs.

Run: .venv/bin/python bench/render_skill.py [--repeat N]
"""

from __future__ import annotations

import argparse
import time

from craft_operator.api.models import Source
from craft_operator.skills import render_skill
from craft_operator.skills.catalog import CATALOG


def typical(count: int) -> list[Source]:
    names = sorted(CATALOG)[:count]
    return [
        Source(name=name, scopes=["#eng", "#ops"] if index % 3 == 0 else None)
        for index, name in enumerate(names)
    ]


def worst_case() -> list[Source]:
    """The API's limits: 100 sources, 500-character descriptions, 50 scopes of 200 chars."""
    hostile = "<script>\n# x ```---\u2028" * 30
    return [
        Source(
            name=f"source_{index:03d}",
            description=hostile[:500],
            # Distinct as sent, identical once cleaned: every one must be sanitized.
            scopes=[hostile[: 200 - index] + "\u200b" * index for index in range(50)],
        )
        for index in range(100)
    ]


def measure(label: str, sources: list[Source], repeat: int) -> None:
    render_skill(sources)  # compile and warm the template cache
    started = time.perf_counter()
    for _ in range(repeat):
        rendered = render_skill(sources)
    elapsed = (time.perf_counter() - started) / repeat
    print(
        f"{label:<34} {elapsed * 1000:8.2f} ms/render   {len(rendered.text.encode()):7d} bytes"
        f"   {rendered.source_count:3d} sources listed"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    measure("no sources", [], args.repeat)
    measure("5 catalog sources", typical(5), args.repeat)
    measure("all 55 catalog sources", typical(len(CATALOG)), args.repeat)
    measure("worst case (API limits, hostile)", worst_case(), max(args.repeat // 10, 1))


if __name__ == "__main__":
    main()
