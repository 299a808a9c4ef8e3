"""A process that pushes, aliases, deletes, pulls and runs ``gc`` on one registry until it is
killed; ``crash_campaign.py`` starts it and SIGKILLs it.

Usage::

    python _crash_worker.py URL BLOBS ARCHIVES LOG SEED [POINT K]

ARCHIVES is a directory of ``*.jaxport`` files (``small-*`` take one ``f32[3]`` input, so they
can carry golden examples). Every operation is written to LOG before (intent) or after (report)
it, one line each, flushed and fsynced, so the campaign knows what the killed process was told:

    pushing NAME DIGEST EXAMPLES     before a push (EXAMPLES: 0 or 1)
    pushed NAME:VERSION DIGEST R     after the push returned (R: blobs it reported repaired)
    deleting NAME:VERSION            before deleting a version (it may or may not happen)
    deleting NAME                    before deleting a whole name
    alias NAME@ALIAS VERSION         after an alias move (VERSION "-": removed)
    pulled NAME:VERSION              after a verified pull
    gc REMOVED KEPT_PENDING          after a gc

On stdout it writes ``ready`` once the registry is open, and ``blocked POINT`` when it reaches
a chosen fault point, where it then sleeps until it is killed (a fault-injecting blob store):

- ``before-put``: the K-th blob write, before any byte is written (pending rows committed);
- ``in-write``: the K-th blob write, its temporary file written but not yet fsynced or renamed
  (``os.fsync`` blocks), so a ``.tmp-*`` file is left behind;
- ``after-put``: the K-th blob write, the blob in place, the version not yet committed;
- ``in-gc``: the K-th blob deletion of ``gc``, inside its transaction (exclusive blob lock held,
  the blob file gone, its row not yet deleted).

Any exception ends the process with a traceback on stderr: the campaign counts it as an error
to a caller.
"""

from __future__ import annotations

import hashlib
import os
import random
import stat
import sys
import time
from pathlib import Path
from typing import Any

NAMES = ("m0", "m1", "m2", "scratch")
ALIASES = ("prod", "canary")
POINTS = ("before-put", "in-write", "after-put", "in-gc")
_EXAMPLE_INPUT_SIZE = 3


class BlockingBlobStore:
    """A blob store that stops (signals and sleeps until killed) at one chosen point."""

    def __init__(self, inner: Any, point: str | None, at: int):
        self._inner = inner
        self.url = inner.url
        self._point = point
        self._at = at
        self._puts = 0
        self._deletes = 0

    def put(self, digest: str, data: bytes, *, replace: bool = False) -> None:
        self._puts += 1
        here = self._puts == self._at
        if here and self._point == "before-put":
            _block("before-put")
        if here and self._point == "in-write":
            os.fsync = _blocking_fsync  # atomic_write: write, fsync (blocks here), rename
        self._inner.put(digest, data, replace=replace)
        if here and self._point == "after-put":
            _block("after-put")

    def delete(self, digest: str) -> None:
        self._inner.delete(digest)
        self._deletes += 1
        if self._deletes == self._at and self._point == "in-gc":
            _block("in-gc")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _block(point: str) -> None:
    sys.stdout.write(f"blocked {point}\n")
    sys.stdout.flush()
    while True:
        time.sleep(60)


_FSYNC = os.fsync


def _blocking_fsync(fd: int) -> None:
    """Blocks at the fsync of the blob's temporary file; a directory's fsync (a prefix
    directory made for the blob, fsynced into its parent first) goes through."""
    if stat.S_ISDIR(os.fstat(fd).st_mode):
        _FSYNC(fd)
        return
    _block("in-write")


class Log:
    """The operation log: each line flushed and fsynced before the caller goes on."""

    def __init__(self, path: str):
        self._file = open(path, "a", encoding="ascii")  # noqa: SIM115 (lives as long as we do)
        self._fsync = os.fsync  # kept: the in-write point replaces os.fsync

    def write(self, line: str) -> None:
        self._file.write(line + "\n")
        self._file.flush()
        self._fsync(self._file.fileno())


def load_archives(directory: str) -> list[tuple[str, bytes, bool]]:
    """``(digest, bytes, takes examples)`` of each archive in ``directory``, sorted by name."""
    out = []
    for path in sorted(Path(directory).glob("*.jaxport")):
        data = path.read_bytes()
        out.append((hashlib.sha256(data).hexdigest(), data, path.name.startswith("small-")))
    return out


class Worker:
    """Random operations on one registry, each logged (see the module docstring)."""

    def __init__(self, reg: Any, archives: list[tuple[str, bytes, bool]], log: Log, seed: int):
        self.reg = reg
        self.archives = archives
        self.log = log
        self.rng = random.Random(seed)
        self.pushes = 0

    def step(self) -> None:
        """One operation; the first one is always a push."""
        roll = self.rng.random() if self.pushes else 0.0
        if roll < 0.45:
            self.push()
        elif roll < 0.60:
            self.alias()
        elif roll < 0.80:
            self.delete()
        elif roll < 0.93:
            self.gc()
        else:
            self.pull()

    def push(self) -> None:
        import numpy as np

        import jaxport

        digest, data, small = self.rng.choice(self.archives)
        name = self.rng.choice(NAMES)
        examples = small and self.rng.random() < 0.1
        aliases = [self.rng.choice(ALIASES)] if self.rng.random() < 0.3 else []
        self.log.write(f"pushing {name} {digest} {int(examples)}")
        x = np.linspace(-1.0, 1.0, _EXAMPLE_INPUT_SIZE, dtype=np.float32)
        result = self.reg.push(
            data,
            name,
            aliases=aliases,
            metadata={"seq": str(self.pushes)},
            # outputs given: push never calls archive bytes (issue 24, F13); these are the
            # campaign's own archives, called here as their producer would
            examples=[((x,), {}, jaxport.loads(data).call(x))] if examples else None,
        )
        self.pushes += 1
        self.log.write(f"pushed {name}:{result.version} {digest} {len(result.repaired)}")

    def _some_version(self) -> tuple[str, int] | None:
        names = self.reg.names()
        if not names:
            return None
        name = self.rng.choice(names)
        refs = self.reg.list(name, limit=1000)
        return (name, self.rng.choice(refs).version) if refs else None

    def alias(self) -> None:
        picked = self._some_version()
        if picked is None:
            return
        name, version = picked
        alias = self.rng.choice(ALIASES)
        removable = alias in self.reg.aliases(name)  # removing a missing alias is an error
        target = None if removable and self.rng.random() < 0.2 else version
        self.reg.alias(name, alias, target)
        self.log.write(f"alias {name}@{alias} {'-' if target is None else target}")

    def delete(self) -> None:
        if self.rng.random() < 0.1 and "scratch" in self.reg.names():
            self.log.write("deleting scratch")
            self.reg.delete("scratch", force=True)
            return
        picked = self._some_version()
        if picked is None:
            return
        name, version = picked
        self.log.write(f"deleting {name}:{version}")
        self.reg.delete(name, version, force=True)

    def gc(self) -> None:
        report = self.reg.gc(min_age=0, temp_age=0)
        self.log.write(f"gc {len(report.digests)} {len(report.kept_pending)}")

    def pull(self) -> None:
        picked = self._some_version()
        if picked is None:
            return
        name, version = picked
        self.reg.pull_bytes(f"{name}:{version}", platform=None)
        self.log.write(f"pulled {name}:{version}")


def _warm_up(archives: list[tuple[str, bytes, bool]]) -> None:
    """Imports and compiles what pushes need, so random kills land in registry operations
    rather than in jax's start-up."""
    import numpy as np

    import jaxport

    for _, data, small in archives:
        exported = jaxport.loads(data)
        if small:
            exported.call(np.zeros(_EXAMPLE_INPUT_SIZE, np.float32))


def main(argv: list[str]) -> None:
    """Runs operations until killed (see the module docstring for ``argv``)."""
    url, blobs, archives, log_path, seed = argv[:5]
    point, at = (argv[5], int(argv[6])) if len(argv) > 5 else (None, 0)
    if point is not None and point not in POINTS:
        raise SystemExit(f"unknown point {point!r}: one of {', '.join(POINTS)}")
    import jaxport
    from jaxport.registry import LocalBlobStore

    store = BlockingBlobStore(LocalBlobStore(blobs), point, at)
    worker_archives = load_archives(archives)
    _warm_up(worker_archives)
    with jaxport.Registry(url, blobs=store) as reg:
        worker = Worker(reg, worker_archives, Log(log_path), int(seed))
        sys.stdout.write("ready\n")
        sys.stdout.flush()
        while True:
            worker.step()


if __name__ == "__main__":
    main(sys.argv[1:])
