"""Worker processes for tests/test_registry_concurrency.py (spawned: importable by name)."""

from __future__ import annotations


def push_many(url: str, blobs: str, worker: int, count: int) -> list[int]:
    """Pushes ``count`` distinct artifacts to the name "shared", moving alias "prod" each time."""
    import jax
    import jax.numpy as jnp

    import jaxport

    versions = []
    with jaxport.Registry(url, blobs=blobs) as reg:
        for i in range(count):
            scale = float(worker * 1000 + i)
            exp = jax.export.export(jax.jit(lambda x, s=scale: x * s))(jnp.zeros(3))
            ref = reg.push(exp, "shared")
            reg.alias("shared", "prod", ref.version)
            versions.append(ref.version)
    return versions


def churn(url: str, blobs: str, worker: int, count: int, archives: list[bytes]) -> list[str]:
    """Pushes archives shared with the other workers to its own name, moves an alias, pulls,
    and deletes every other version (so blobs go unreferenced while others re-push them).

    Returns the ``name:version`` of every version it kept; raises on any error.
    """
    import jaxport

    name, kept = f"w{worker}", []
    with jaxport.Registry(url, blobs=blobs) as reg:
        for i in range(count):
            ref = reg.push(archives[(worker + i) % len(archives)], name, metadata={"i": str(i)})
            reg.alias(name, "prod", ref.version)
            assert reg.pull_bytes(f"{name}@prod") == archives[(worker + i) % len(archives)]
            if i % 2:  # also an existing version: else, once each archive is one, none goes
                reg.delete(name, ref.version, force=True)
                if f"{name}:{ref.version}" in kept:
                    kept.remove(f"{name}:{ref.version}")
            elif f"{name}:{ref.version}" not in kept:
                kept.append(f"{name}:{ref.version}")
    return kept


def gc_loop(url: str, blobs: str, stop: str) -> int:
    """Runs ``gc(min_age=0)`` until the file ``stop`` exists; returns how many runs it made."""
    import os

    import jaxport

    runs = 0
    with jaxport.Registry(url, blobs=blobs) as reg:
        while not os.path.exists(stop) or runs == 0:
            reg.gc(min_age=0)
            runs += 1
    return runs
