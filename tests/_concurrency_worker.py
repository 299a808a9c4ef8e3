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


def gc_loop(url: str, blobs: str, stop: str, temp_age: float = 3600.0) -> int:
    """Runs ``gc(min_age=0, temp_age=temp_age)`` until the file ``stop`` exists; returns how
    many runs it made."""
    import os

    import jaxport

    runs = 0
    with jaxport.Registry(url, blobs=blobs) as reg:
        while not os.path.exists(stop) or runs == 0:
            reg.gc(min_age=0, temp_age=temp_age)
            runs += 1
    return runs


def push_identical(url: str, blobs: str, barrier: object, rounds: int) -> list[list[int]]:
    """Pushes the same content as every other worker to the name "same", ``rounds`` times, all
    workers released together by ``barrier`` (a ``multiprocessing`` Barrier) each round: archive
    bytes, then an Exported with metadata and an alias. Returns the versions it got, per round.
    """
    import jax
    import jax.numpy as jnp

    import jaxport

    exp = jax.export.export(jax.jit(jnp.sin))(jnp.zeros(3))
    archive = jaxport.dumps(exp)
    got: list[list[int]] = []
    with jaxport.Registry(url, blobs=blobs) as reg:
        for r in range(rounds):
            barrier.wait(timeout=120)  # type: ignore[attr-defined]
            a = reg.push(archive, f"same{r}").version
            barrier.wait(timeout=120)  # type: ignore[attr-defined]
            b = reg.push(exp, f"meta{r}", metadata={"k": "v"}, aliases=["prod"]).version
            got.append([a, b])
    return got


def push_beside_gc(url: str, blobs: str, archives: list[bytes]) -> list[str]:
    """Pushes each archive to its own name and pulls it back; returns the ``name:version`` of
    each push (raises on any error, e.g. a temporary file removed under the push)."""
    import jaxport

    refs = []
    with jaxport.Registry(url, blobs=blobs) as reg:
        for i, archive in enumerate(archives):
            ref = reg.push(archive, f"g{i}")
            assert reg.pull_bytes(f"g{i}:{ref.version}") == archive
            refs.append(f"g{i}:{ref.version}")
    return refs
