"""Commit directories against a sweep (``registry/_workdirs.py``; issue 24 F8): a ``gc`` or a
server start sweeping at any moment never removes the directory of a commit in flight."""

from __future__ import annotations

import threading
import time

from jaxport.registry import _workdirs
from jaxport.registry._blobs import LocalBlobStore


def test_a_sweep_never_removes_a_commit_being_made(tmp_path, monkeypatch):
    blobs = LocalBlobStore(str(tmp_path / "blobs"))
    real_lock = _workdirs._lock

    def slow_lock(fd: int, *, wait: bool) -> bool:
        if wait:  # the commit's own lock: widen the moment between making and locking
            time.sleep(0.02)
        return real_lock(fd, wait=wait)

    monkeypatch.setattr(_workdirs, "_lock", slow_lock)
    stop = threading.Event()
    swept: list[str] = []

    def sweep() -> None:
        while not stop.is_set():
            swept.extend(_workdirs.sweep_commit_dirs(blobs))

    sweeper = threading.Thread(target=sweep, daemon=True)
    sweeper.start()
    try:
        for _ in range(25):
            with _workdirs.commit_dir(blobs) as path:
                (path / "part").write_bytes(b"x")  # fails if a sweep removed the directory
                time.sleep(0.005)
                assert (path / "part").read_bytes() == b"x"
    finally:
        stop.set()
        sweeper.join(timeout=10)
    # what a sweep reports is only directories whose commit had ended (their owner was
    # removing them): every live one kept its files above
    assert list(_workdirs.workdir_root(blobs).iterdir()) == []


def test_a_killed_commits_directory_is_still_swept(tmp_path):
    blobs = LocalBlobStore(str(tmp_path / "blobs"))
    with _workdirs.commit_dir(blobs) as path:
        pass
    assert not path.exists()
    root = _workdirs.workdir_root(blobs)
    dead = root / (_workdirs.COMMIT_PREFIX + "dead")
    dead.mkdir()
    (dead / ".lock").write_bytes(b"")  # its process died: nobody holds the lock
    assert _workdirs.sweep_commit_dirs(blobs) == [str(dead)] and not dead.exists()
