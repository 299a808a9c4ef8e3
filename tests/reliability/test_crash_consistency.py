"""Crash consistency in CI: a few SIGKILLs of a process pushing, aliasing, deleting and running
gc, on SQLite and PostgreSQL; after each the registry opens, verifies clean, holds every push
the process reported, and gc leaves nothing behind (the killed pushes' pending rows included).

The checks are ``crash_campaign.py``'s (its docstring lists them); it runs hundreds of kills
for the figures in RELIABILITY.md.
"""

from __future__ import annotations

import pytest
from crash_campaign import Kill, run_campaign

#: Each chosen point once, then two random kills; the registry is cleaned after every kill.
SCHEDULE = (
    Kill("after-put", 1),  # the first blob of an empty registry: written, never committed
    Kill("in-write", 1),  # inside the first blob write: a .tmp-* file is left
    Kill("before-put", 1),  # pending rows registered, no blob written
    Kill("in-gc", 1),  # gc's transaction open, a blob file already deleted
    Kill(delay=0.3),
    Kill(delay=0.05),
)


@pytest.mark.slow
def test_sigkilled_writer_leaves_a_consistent_registry(db_url, tmp_path):
    records = run_campaign(db_url, tmp_path, SCHEDULE, cleanup_every=1)
    assert [r.reached for r in records[:4]] == [True] * 4
    assert all(r.cleaned for r in records)

    after_put, in_write, before_put, _ = records[:4]
    # The killed push left pending rows naming its pid; gc drops them (the pid is gone) and
    # removes the blob it wrote at once instead of keeping it for PENDING_TTL.
    assert after_put.interrupted_push and after_put.pending_groups == 1
    assert after_put.removed_blobs == 1 and after_put.kept_pending == 0
    assert in_write.temp_files == 1 and in_write.pending_groups == 1
    assert before_put.pending_groups == 1 and before_put.removed_blobs == 0
    assert all(r.pending_after_gc == r.kept_pending == 0 for r in records)
    assert sum(r.checked_versions for r in records) > 0
