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
