"""Signature verdicts of compiled sets, cached on this host: "the bundle with sha256 B verifies
the manifest with sha256 M with the key whose fingerprint is F", a marker file per verdict.

Verifying a bundle needs ``model-signing``, whose import (sigstore, tuf, pydantic models)
takes 0.5-1 s: more than the compile it saves on a small model. A serving process that starts
again on the same host reads the verdict instead. The files are under ``$JAXPORT_CACHE``
(else ``$XDG_CACHE_HOME/jaxport``, else ``~/.cache/jaxport``, as the module sandbox's verdicts)
in ``compiled-signatures/``; a verdict is believed only from a regular file owned by this user
and writable by no one else, in a directory of the same kind, and only for a key (not CA
certificates). Whoever can write there can also write into jax's cache directory of this
user's processes, so the cache adds no trust that the user's own files did not already hold.
A failed write is ignored: the cache only saves work.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
from pathlib import Path

__all__ = ["remember", "verified"]

_HEX = re.compile(r"[0-9a-f]{64}")


def verified(fingerprint: str, manifest: str, bundle: str) -> bool:
    """Whether this host recorded that ``bundle`` verifies ``manifest`` with key ``fingerprint``
    (each a sha256, hex)."""
    path = _path(fingerprint, manifest, bundle)
    return path is not None and all(_owned(p) for p in (path, path.parent, path.parent.parent))


def remember(fingerprint: str, manifest: str, bundle: str) -> None:
    """Records a verdict (after the library verified it); a failure is ignored."""
    path = _path(fingerprint, manifest, bundle)
    if path is None:
        return
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        os.close(fd)


def _path(fingerprint: str, manifest: str, bundle: str) -> Path | None:
    if not all(_HEX.fullmatch(d) for d in (fingerprint, manifest, bundle)):
        return None
    from jaxport.export._internal import default_cache_dir

    return default_cache_dir() / "compiled-signatures" / fingerprint / f"{manifest}-{bundle}"


def _owned(path: Path) -> bool:
    try:
        info = os.lstat(path)
    except OSError:
        return False
    kind_ok = stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)
    return kind_ok and info.st_uid == os.getuid() and not info.st_mode & 0o022
