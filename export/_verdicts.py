"""Verdicts of the module sandbox, cached by (module sha256, jaxlib version, facts version).

A verdict is what a sandbox worker said of a module's bytes: the facts it read (custom-call
targets, ``main``'s signature, device attributes) or MLIR's refusal. Parsing is deterministic
for a jaxlib version, so a verdict is reused instead of parsing again: from a small local cache
(a JSON file per key under ``$JAXPORT_CACHE``, else ``$XDG_CACHE_HOME/jaxport``, else
``~/.cache/jaxport``) and, for pulls, from the registry, which records it at push. Crashes and
time-outs are never cached: they are retried (and refused again) each time.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

__all__ = [
    "FACTS_VERSION",
    "LayeredVerdictCache",
    "LocalVerdictCache",
    "Verdict",
    "VerdictCache",
    "VerdictKey",
    "default_cache_dir",
]

#: Bumped whenever the worker's facts change meaning, so older cached verdicts are not used.
FACTS_VERSION = 1
_MAX_ENTRY = 1 << 20  # a cache file larger than this is not read
_VERSION_RE = re.compile(r"^[0-9A-Za-z.+_-]{1,64}$")
_DIGEST_RE = re.compile(r"^[0-9a-f]{64}$")


@dataclasses.dataclass(frozen=True)
class VerdictKey:
    """What a verdict is valid for: the module's sha256 (hex), the jaxlib that parsed it."""

    digest: str
    jaxlib_version: str
    facts_version: int = FACTS_VERSION


@dataclasses.dataclass(frozen=True)
class Verdict:
    """The sandbox's answer for one module: ``facts`` when MLIR read it, else ``error``."""

    facts: Mapping[str, Any] | None
    error: str | None = None

    @property
    def accepted(self) -> bool:
        return self.facts is not None

    def to_json(self) -> str:
        return json.dumps({"facts": self.facts, "error": self.error})

    @classmethod
    def from_json(cls, data: str | bytes) -> Verdict | None:
        """The verdict stored as ``data``, or None if it is not one (a damaged entry)."""
        try:
            obj = json.loads(data)
            facts, error = obj["facts"], obj["error"]
            if not (isinstance(facts, dict) or facts is None):
                return None
            return cls(facts, None if error is None else str(error))
        except (ValueError, KeyError, TypeError, RecursionError):
            return None


class VerdictCache(Protocol):
    """Where verdicts are kept: the local cache, the registry's table, or both."""

    def get(self, key: VerdictKey) -> Verdict | None: ...

    def put(self, key: VerdictKey, verdict: Verdict) -> None: ...


def default_cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """``$JAXPORT_CACHE``, else ``$XDG_CACHE_HOME/jaxport``, else ``~/.cache/jaxport``."""
    env = os.environ if environ is None else environ
    return _cache_dir(env.get("JAXPORT_CACHE"), env.get("XDG_CACHE_HOME"), env.get("HOME"))


@functools.lru_cache(maxsize=8)
def _cache_dir(jaxport_cache: str | None, xdg_cache_home: str | None, home: str | None) -> Path:
    """``default_cache_dir`` of these variables (looked up once per process for each: every
    module a reader vets asks, and ``Path.home()`` costs tens of microseconds)."""
    if jaxport_cache:
        return Path(jaxport_cache)
    base = xdg_cache_home or str(Path.home() / ".cache")
    return Path(base) / "jaxport"


class LocalVerdictCache:
    """Verdicts as files ``verdicts/<jaxlib>/<facts version>/<digest>.json`` under ``root``.

    A damaged, unreadable or oversized entry is a miss; a write that fails (a read-only home)
    is ignored: the cache only saves work.
    """

    def __init__(self, root: str | os.PathLike[str] | None = None):
        self.root = Path(root) if root is not None else default_cache_dir()

    def _path(self, key: VerdictKey) -> Path | None:
        if not (_DIGEST_RE.match(key.digest) and _VERSION_RE.match(key.jaxlib_version)):
            return None
        v = f"{key.jaxlib_version}/{key.facts_version}"
        return self.root / "verdicts" / v / f"{key.digest}.json"

    def get(self, key: VerdictKey) -> Verdict | None:
        path = self._path(key)
        if path is None:
            return None
        try:
            with open(path, "rb") as f:
                data = f.read(_MAX_ENTRY + 1)
        except OSError:
            return None
        return Verdict.from_json(data) if len(data) <= _MAX_ENTRY else None

    def put(self, key: VerdictKey, verdict: Verdict) -> None:
        path = self._path(key)
        if path is None:
            return
        with contextlib.suppress(OSError):
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
            try:
                with os.fdopen(fd, "w") as f:
                    f.write(verdict.to_json())
                os.replace(tmp, path)
            except OSError:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)


class LayeredVerdictCache:
    """Looks in ``first`` then ``second``; a hit in ``second`` is copied to ``first``; puts go
    to both."""

    def __init__(self, first: VerdictCache, second: VerdictCache):
        self.first, self.second = first, second

    def get(self, key: VerdictKey) -> Verdict | None:
        found = self.first.get(key)
        if found is None:
            found = self.second.get(key)
            if found is not None:
                self.first.put(key, found)
        return found

    def put(self, key: VerdictKey, verdict: Verdict) -> None:
        self.first.put(key, verdict)
        self.second.put(key, verdict)
