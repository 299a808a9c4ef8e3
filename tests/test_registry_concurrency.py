"""Several processes pushing to one name at once, on SQLite and PostgreSQL."""

from __future__ import annotations

import itertools
import multiprocessing
from concurrent.futures import ProcessPoolExecutor

import pytest
from _concurrency_worker import push_many

import jaxport

WORKERS, PUSHES = 4, 5


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
            assert after[1] == before[2], "each move starts where the previous one ended"
        assert reg.aliases("shared")["prod"] == history[-1][2]
