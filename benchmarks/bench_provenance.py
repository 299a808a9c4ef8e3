"""What recording provenance costs a push (issue 26 §5): median wall time of pushing a small
function to a SQLite registry, in one run, interleaved push by push:

    python benchmarks/bench_provenance.py [--pushes 25] [--repo PATH]

- ``off``: no provenance captured (what a push cost before);
- ``thread``: as ``Registry.push`` does it, ``git`` in a thread while the archive is made;
- ``before``: the same capture waited for before the push starts (what a plain call costs);

each inside a git work tree (``--repo``, default this checkout) and outside one (a temporary
directory). Prints the medians and each mode's ratio to ``off``. A shared machine moves the
times; the ratios measured in one run hold better.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
from _machine import load_average

import jaxport
import jaxport.registry._registry_writes as writes
from jaxport.registry._lineage import Provenance

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pushes", type=int, default=25, help="pushes per mode and place")
    parser.add_argument("--repo", type=Path, default=ROOT, help="a git work tree")
    args = parser.parse_args()
    captured = writes.capture

    def before(sources: Any) -> Provenance:
        found = captured(sources)
        return found if isinstance(found, Provenance) else found()

    modes: dict[str, Callable[[Any], Any]] = {
        "off": lambda sources: Provenance(),
        "thread": captured,
        "before": before,
    }
    with tempfile.TemporaryDirectory() as tmp:
        places = {"git work tree": str(args.repo), "no work tree": tmp}
        reg = jaxport.Registry(f"sqlite:///{tmp}/r.db", blobs=f"{tmp}/blobs")
        count = args.pushes * len(modes) * len(places) + 1
        spec = jax.ShapeDtypeStruct((3,), jnp.float32)
        exported = [jax.export.export(jax.jit(lambda x, i=i: x + i))(spec) for i in range(count)]
        reg.push(exported.pop(), "warm-up")
        times: dict[tuple[str, str], list[float]] = {(m, p): [] for m in modes for p in places}
        for _ in range(args.pushes):
            for place, directory in places.items():
                os.chdir(directory)
                for mode, capture in modes.items():
                    writes.capture = capture  # type: ignore[assignment]
                    start = time.perf_counter()
                    reg.push(exported.pop(), "bench")
                    times[(mode, place)].append(time.perf_counter() - start)
        writes.capture = captured
        reg.close()
    print(load_average())
    for place in places:
        off = statistics.median(times[("off", place)])
        for mode in modes:
            median = statistics.median(times[(mode, place)])
            print(f"{place:14} {mode:7} {median * 1e3:6.1f} ms  {median / off:4.2f}x off")


if __name__ == "__main__":
    main()
