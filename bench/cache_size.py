"""KiB of the operator's watch cache per object, for the operator code on ``PYTHONPATH``.

``operator_load.py`` dumps the objects of a run (as the server lists them: what a watch
delivers) into a JSON file, ``{kind: [object, ...]}`` with the cache's kind names, and runs
this script once per operator version (old and new code on the same objects: the ratio
has no noise). Each object is decoded on its own, as a watch event is, and put into an
``ObjectCache``; what tracemalloc still counts once the input is gone is the cache's.
Prints ``{kind: KiB per object, "all": KiB per object}`` as JSON.

    PYTHONPATH=/tmp/lean-base/operator .venv/bin/python bench/cache_size.py objects.json

``BENCH_CACHED_OBJECTS=objects.json operator_load.py ...`` keeps the last run's objects there.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path
from typing import Any

#: The operator code to run instead of the installed one (its ``operator/`` directory):
#: the old code, for the ratio against it. Read by the operator's start and by this script.
OPERATOR_CODE = "BENCH_OPERATOR_PYTHONPATH"


def operator_env(env: dict[str, str]) -> dict[str, str]:
    """``env`` for a process that runs the operator code under test."""
    code = os.environ.get(OPERATOR_CODE)
    return {**env, "PYTHONPATH": code} if code else env


def measure(objects: dict[str, list[dict[str, Any]]], workdir: Path) -> dict[str, float]:
    """KiB per cached object for ``objects`` (by cache kind), with the code under test."""
    path = Path(os.environ.get("BENCH_CACHED_OBJECTS") or workdir / "cached-objects.json")
    path.write_text(json.dumps(objects))
    result = subprocess.run(
        [sys.executable, __file__, str(path)],
        env=operator_env(dict(os.environ)),
        capture_output=True,
        text=True,
        check=True,
    )
    figures: dict[str, float] = json.loads(result.stdout)
    return figures


def kib_per_object(texts: dict[str, list[str]]) -> dict[str, float]:
    """The cache's memory per object, per kind and over all of them."""
    from craft_operator.kube.cache import ObjectCache

    figures: dict[str, float] = {}
    total, count = 0, 0
    for kind, objects in texts.items():
        if not objects:
            continue
        gc.collect()
        tracemalloc.start()
        cache = ObjectCache()
        for text in objects:
            cache.put(kind, json.loads(text))
        gc.collect()
        size = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        del cache
        figures[kind] = size / len(objects) / 1024
        total, count = total + size, count + len(objects)
    figures["all"] = total / max(count, 1) / 1024
    return figures


def main() -> None:
    dumped = json.loads(Path(sys.argv[1]).read_text())
    texts = {kind: [json.dumps(obj) for obj in objects] for kind, objects in dumped.items()}
    print(json.dumps(kib_per_object(texts)))


if __name__ == "__main__":
    main()
