"""Several processes at once on one registry, on SQLite and PostgreSQL: version allocation,
and pushes, pulls, alias moves and deletes beside ``gc(min_age=0)``: nothing lost, no error."""

from __future__ import annotations

import itertools
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor

import jax
import jax.numpy as jnp
import pytest
from _concurrency_worker import churn, gc_loop, push_many

import jaxport

WORKERS, PUSHES = 4, 5
#: Processes and iterations of the gc race (tests/reliability runs more: RELIABILITY.md).
CHURN_WORKERS = int(os.environ.get("JAXPORT_CHURN_WORKERS", "3"))
CHURN_PUSHES = int(os.environ.get("JAXPORT_CHURN_PUSHES", "12"))


@pytest.mark.slow
def test_concurrent_pushes_get_distinct_contiguous_versions(db_url, tmp_path):
    blobs = str(tmp_path / "blobs")
    jaxport.Registry(db_url, blobs=blobs).close()  # create the schema once
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(WORKERS, mp_context=ctx) as pool:
        futures = [pool.submit(push_many, db_url, blobs, w, PUSHES) for w in range(WORKERS)]
        per_worker = [f.result(timeout=300) for f in futures]
    versions = sorted(v for vs in per_worker for v in vs)
    assert versions == list(range(1, WORKERS * PUSHES + 1))
    for vs in per_worker:
        assert vs == sorted(vs)
    with jaxport.Registry(db_url, blobs=blobs) as reg:
        refs = reg.list("shared", limit=1000)
        assert [r.version for r in refs] == versions
        for ref in refs:  # every blob verifies
            reg.read_blob(ref.digests[0])
        history = reg.alias_history("shared", "prod")
        assert len(history) == WORKERS * PUSHES
        for before, after in itertools.pairwise(history):
            assert after.from_version == before.to_version, "each move starts where one ended"
        assert reg.aliases("shared")["prod"] == history[-1].to_version


@pytest.mark.slow
def test_gc_beside_pushes_pulls_alias_moves_and_deletes_loses_nothing(db_url, tmp_path):
    blobs, stop = str(tmp_path / "blobs"), str(tmp_path / "stop")
    archives = [
        jaxport.dumps(jax.export.export(jax.jit(f))(jnp.zeros(3)))
        for f in (jnp.sin, jnp.cos, jnp.tanh)
    ]
    jaxport.Registry(db_url, blobs=blobs).close()
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(CHURN_WORKERS + 1, mp_context=ctx) as pool:
        gc = pool.submit(gc_loop, db_url, blobs, stop)
        futures = [
            pool.submit(churn, db_url, blobs, w, CHURN_PUSHES, archives)
            for w in range(CHURN_WORKERS)
        ]
        try:
            kept = [ref for f in futures for ref in f.result(timeout=600)]
        finally:
            open(stop, "w").close()  # the gc loop ends also when a worker failed
        assert gc.result(timeout=120) >= 1
    with jaxport.Registry(db_url, blobs=blobs) as reg:
        for ref in kept:
            assert reg.pull_bytes(ref) in archives
        assert reg.verify().ok
        assert reg.gc(min_age=0).kept_pending == ()
