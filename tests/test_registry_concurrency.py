"""Several processes at once on one registry, on SQLite and PostgreSQL: version allocation,
pushes, pulls, alias moves and deletes beside ``gc(min_age=0)`` (and ``temp_age=0``): nothing
lost, no error; identical content pushed at the same moment is one version."""

from __future__ import annotations

import itertools
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor

import jax
import jax.numpy as jnp
import pytest
from _concurrency_worker import (
    churn,
    gc_loop,
    push_beside_gc,
    push_identical,
    push_many,
)

import jaxport

WORKERS, PUSHES = 4, 5
#: Processes and iterations of the gc race (tests/reliability runs more: RELIABILITY.md).
CHURN_WORKERS = int(os.environ.get("JAXPORT_CHURN_WORKERS", "3"))
CHURN_PUSHES = int(os.environ.get("JAXPORT_CHURN_PUSHES", "12"))
#: Processes pushing identical content at once, and how many rounds they make.
SAME_WORKERS, SAME_ROUNDS = 8, int(os.environ.get("JAXPORT_SAME_ROUNDS", "2"))
#: Pushes beside a ``gc(temp_age=0)`` loop (each a 256 KiB archive, so writes take a while).
TEMP_PUSHES = int(os.environ.get("JAXPORT_TEMP_PUSHES", "40"))


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


@pytest.mark.slow
def test_identical_content_pushed_at_once_is_one_version(db_url, tmp_path):
    """8 processes push the same archive bytes to one name at the same moment, then the same
    Exported with metadata and an alias: one version each time (issue 15: 4 and 6 versions
    on PostgreSQL before a unique content key)."""
    blobs = str(tmp_path / "blobs")
    jaxport.Registry(db_url, blobs=blobs).close()
    ctx = multiprocessing.get_context("spawn")
    with ctx.Manager() as manager, ProcessPoolExecutor(SAME_WORKERS, mp_context=ctx) as pool:
        barrier = manager.Barrier(SAME_WORKERS)
        futures = [
            pool.submit(push_identical, db_url, blobs, barrier, SAME_ROUNDS)
            for _ in range(SAME_WORKERS)
        ]
        per_worker = [f.result(timeout=300) for f in futures]
    for r in range(SAME_ROUNDS):
        assert {w[r][0] for w in per_worker} == {1}, per_worker
        assert {w[r][1] for w in per_worker} == {1}, per_worker
    with jaxport.Registry(db_url, blobs=blobs) as reg:
        for r in range(SAME_ROUNDS):
            assert [ref.version for ref in reg.list(f"same{r}")] == [1]
            assert [ref.version for ref in reg.list(f"meta{r}")] == [1]
            assert reg.aliases(f"meta{r}") == {"prod": 1}
            assert reg.get(f"meta{r}:1").metadata == {"k": "v"}
        assert reg.verify().ok


@pytest.mark.slow
def test_pushes_beside_gc_of_every_temp_file_lose_nothing(db_url, tmp_path):
    """``gc(min_age=0, temp_age=0)`` in a loop beside a process pushing: no push fails (issue
    15: a temporary file removed under the push raised FileNotFoundError), nothing is lost."""
    import numpy as np

    blobs, stop = str(tmp_path / "blobs"), str(tmp_path / "stop")
    big = np.random.default_rng(0).standard_normal(64 << 10).astype(np.float32)  # 256 KiB
    archives = [
        jaxport.dumps(jax.export.export(jax.jit(lambda x, i=i: x * i + big))(jnp.zeros(big.shape)))
        for i in range(TEMP_PUSHES)
    ]
    jaxport.Registry(db_url, blobs=blobs).close()
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(2, mp_context=ctx) as pool:
        gc = pool.submit(gc_loop, db_url, blobs, stop, 0.0)
        pushes = pool.submit(push_beside_gc, db_url, blobs, archives)
        try:
            refs = pushes.result(timeout=600)
        finally:
            open(stop, "w").close()
        assert gc.result(timeout=120) >= 1
    assert len(refs) == TEMP_PUSHES
    with jaxport.Registry(db_url, blobs=blobs) as reg:
        for ref, archive in zip(refs, archives, strict=True):
            assert reg.pull_bytes(ref) == archive
        assert reg.verify().ok
