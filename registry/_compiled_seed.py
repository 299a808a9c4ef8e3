"""Using compiled sets: each one checked, then its files written into jax's persistent
compilation cache directory, where the method's first call finds them (``cache_hits``).

The order of the checks is the rule (``registry/_compiled_types.py`` says why): a set is
considered only when its signer is a trusted key and its row's key fields match this host;
then its manifest blob is read (verified against its digest), its bundle verified with the
trusted keys over the manifest's sha256 (or this host's cached verdict of that,
``registry/_compiled_verdicts.py``), the signed manifest's own key fields compared with
this host and the variant, and every file read and checked against the manifest's sha256 and
size. No blob is read past its limit, whatever a row or a server says: a manifest
``MAX_MANIFEST_BYTES``, a bundle ``MAX_BUNDLE_BYTES``, a file its signed size. Only when every
check of a method's set passed are its files written (atomically, each file whole or not at
all: a new file renamed over the name, so a process killed meanwhile leaves a ``.tmp-`` file
jax never reads; a symlink, FIFO or other file at the name is replaced, never followed).
Anything else is a reason, never an error: the pull goes on and jax compiles.

The directory is the one jax's cache uses in this process (``jax_compilation_cache_dir``), or,
where none is configured, a private one this process makes (``tempfile.mkdtemp``: mode 0700,
removed at exit) and configures: it holds only files verified here. A configured directory
that every user may write into is refused: anyone could put native code there for jax to load,
so verifying what jaxport writes would assure nothing. Either way the process's
``jax_persistent_cache_enable_xla_caches`` becomes ``"none"``, as where the set was compiled
(``jaxport._compiled_host.XLA_CACHES``): jax's default puts the path of XLA's GPU autotune
cache, under the cache directory, into every compile's options and so into its cache key,
which would make a key depend on the directory.
"""

from __future__ import annotations

import atexit
import os
import shutil
import stat
import tempfile
import threading
from collections.abc import Sequence
from typing import Any

from jaxport import JaxportError
from jaxport._compiled_host import XLA_CACHES, HostKey, jax_option
from jaxport._signing import MAX_BUNDLE_BYTES, Trusted, verify_digest
from jaxport.registry._compiled_store import CompiledStore, StoredSet
from jaxport.registry._compiled_types import (
    MAX_MANIFEST_BYTES,
    CompiledUse,
    mismatch,
    parse_manifest,
)
from jaxport.registry._types import VariantInfo

__all__ = ["cache_dir", "cache_hits", "seed"]

_lock = threading.Lock()
_hits = [0]
_listening: list[bool] = []
_private: list[str] = []


def seed(
    store: CompiledStore,
    variant: VariantInfo,
    methods: Sequence[str] | None,
    trusted: Sequence[Trusted],
    host: HostKey,
) -> CompiledUse:
    """Writes the verified sets of ``methods`` of ``variant`` (None: of every method with a
    stored set) into jax's cache directory."""
    hits = cache_hits()  # the listener is on before any first call
    if not trusted:
        return CompiledUse(False, "no trusted key to verify compiled executables with")
    stored = store.sets_of(variant.digest)
    if methods is None:
        methods = sorted({s.made.method for s in stored})
    if not methods:
        none = f"no compiled executables stored for sha256:{variant.digest[:12]} (jaxport compile)"
        return CompiledUse(False, none, _hits_at_start=hits)
    ready: dict[str, list[tuple[str, bytes]]] = {}
    skipped: dict[str, str] = {}
    signers = set()
    for method in methods:
        try:
            files, signer = _verified(store, variant, method, stored, trusted, host)
        except _Unused as e:
            skipped[method] = str(e)
        else:
            ready[method] = files
            signers.add(signer)
    if not ready:
        return CompiledUse(False, _why(skipped), skipped=skipped, _hits_at_start=hits)
    where, why = cache_dir()
    if where is None:
        return CompiledUse(False, str(why), skipped=skipped, _hits_at_start=hits)
    count = _write_sets(where, ready, skipped)
    if not ready:
        return CompiledUse(False, _why(skipped), skipped=skipped, _hits_at_start=hits)
    import jax

    jax.config.update("jax_persistent_cache_enable_xla_caches", XLA_CACHES)  # as compiled
    return CompiledUse(
        True, None, tuple(ready), skipped, where, count, ",".join(sorted(signers)), hits
    )


class _Unused(Exception):
    """Why one method's set is not used."""


def _verified(
    store: CompiledStore,
    variant: VariantInfo,
    method: str,
    stored: list[StoredSet],
    trusted: Sequence[Trusted],
    host: HostKey,
) -> tuple[list[tuple[str, bytes]], str]:
    """The files of ``method``'s set for this host, every check passed; its signer.

    Raises:
        _Unused: why not (the first check that failed).
    """
    mine = [s for s in stored if s.made.method == method]
    if not mine:
        raise _Unused("no compiled executables stored for it (jaxport compile)")
    fitting = [s for s in mine if mismatch(s.made, host) is None]
    if not fitting:
        raise _Unused(str(mismatch(mine[-1].made, host)))
    keys = {k.fingerprint for k in trusted if k.kind == "key"}
    by_trusted = [s for s in fitting if s.made.signer in keys or _has_certificates(trusted)]
    if not by_trusted:
        signers = ", ".join(sorted({s.made.signer[:12] for s in fitting}))
        shorts = ", ".join(k.short for k in trusted)
        raise _Unused(f"signed by {signers}, not by a trusted key ({shorts})")
    chosen = by_trusted[-1]
    try:
        manifest = store.read(chosen.made.manifest_digest, MAX_MANIFEST_BYTES)
        bundle = (
            None if _cached(chosen, trusted) else store.read(chosen.bundle_digest, MAX_BUNDLE_BYTES)
        )
        signer = _signer(bundle, chosen, trusted)
        signed = parse_manifest(manifest)
        if (signed.digest, signed.method) != (variant.digest, method):
            raise _Unused("its signed manifest is of another archive or method")
        differs = mismatch(signed, host)
        if differs is not None:
            raise _Unused(f"its signed manifest: {differs}")
        files = [(f.name, _file(store, f.sha256, f.size)) for f in signed.files]
    except JaxportError as e:
        raise _Unused(f"{type(e).__name__}: {str(e)[:300]}") from None
    return files, signer


def _cached(chosen: StoredSet, trusted: Sequence[Trusted]) -> bool:
    """This host verified the set's bundle over its manifest with its signer, a trusted key
    (``registry/_compiled_verdicts.py``)."""
    from jaxport.registry._compiled_verdicts import verified

    keys = {k.fingerprint for k in trusted if k.kind == "key"}
    made = chosen.made
    return made.signer in keys and verified(made.signer, made.manifest_digest, chosen.bundle_digest)


def _signer(bundle: bytes | None, chosen: StoredSet, trusted: Sequence[Trusted]) -> str:
    """The trusted key the bundle verifies with over the manifest's sha256 (``model-signing``),
    its verdict recorded; None bundle: a cached verdict of this host (``_cached``)."""
    from jaxport.registry._compiled_verdicts import remember

    if bundle is None:
        return chosen.made.signer
    found = verify_digest(bundle, chosen.made.manifest_digest, trusted)
    if found.kind == "key":
        remember(found.fingerprint, chosen.made.manifest_digest, chosen.bundle_digest)
    return found.fingerprint


def _file(store: CompiledStore, sha256: str, size: int) -> bytes:
    data = store.read(sha256, size)  # its sha256 checked: the one the signed manifest names
    if len(data) != size:
        raise _Unused(f"a file of {len(data)} bytes, the signed manifest says {size}")
    return data


def _has_certificates(trusted: Sequence[Trusted]) -> bool:
    return any(k.kind == "certificate" for k in trusted)


def _why(skipped: dict[str, str]) -> str:
    if len(set(skipped.values())) == 1:
        return next(iter(skipped.values()))
    return "; ".join(f"{m or 'the function'}: {r}" for m, r in skipped.items())


def _write_sets(
    where: str, ready: dict[str, list[tuple[str, bytes]]], skipped: dict[str, str]
) -> int:
    """Writes each method's verified files into ``where``; the files written. A method whose
    set names a file an earlier method's set wrote with other bytes, or whose file the
    directory refused, moves from ``ready`` to ``skipped`` (the files written before stay:
    each one verified and whole)."""
    written: dict[str, tuple[str, bytes]] = {}  # name -> the method that wrote it, its bytes
    count = 0
    for method, files in list(ready.items()):
        try:
            for name, data in files:
                other = written.get(name)
                if other is not None and other[1] != data:
                    raise _Unused(f"its file {name[:60]} is {other[0] or 'the function'}'s "
                                  "too, with other bytes")  # fmt: skip
            for name, data in files:
                _write(where, name, data)
                written[name] = (method, data)
        except _Unused as e:
            skipped[method] = str(e)
            del ready[method]
        except OSError as e:
            skipped[method] = f"jax's cache directory refused a file: {e.strerror or e}"
            del ready[method]
        else:
            count += len(files)
    return count


def _write(where: str, name: str, data: bytes) -> None:
    """Writes one verified file, unless a regular file of the same bytes is there: a new file
    renamed over the name (jax reads the old file or the whole new one, never a part).
    Whatever else is at the name (a symlink, a FIFO, a file of other bytes) is replaced, never
    followed or read past ``len(data)`` bytes.

    Raises:
        OSError: the directory refused it (a directory at the name, no space, read-only).
    """
    from jaxport._io import atomic_write

    target = os.path.join(where, name)
    if not _holds(target, data):
        atomic_write(target, [data])


def _holds(target: str, data: bytes) -> bool:
    """Whether ``target`` is a regular file (not a symlink) of exactly ``data``'s bytes."""
    try:
        fd = os.open(target, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size != len(data):
            return False
        return f.read(len(data) + 1) == data


def cache_dir() -> tuple[str | None, str | None]:
    """jax's persistent cache directory in this process, configured by jaxport where none
    was (a private temporary directory); or None and why it cannot be used."""
    import jax

    if not jax_option("jax_enable_compilation_cache"):
        return None, "jax's compilation cache is off here (jax_enable_compilation_cache=False)"
    from jaxport.export._internal import compilation_cache

    cc = compilation_cache()  # None: a jax without it (the configured directory only)
    active = getattr(getattr(cc, "_cache", None), "_path", None)
    where = str(active) if active is not None else jax_option("jax_compilation_cache_dir")
    if where:
        if "://" in str(where) or (not os.path.isdir(where) and not _made(str(where))):
            return None, f"jax's cache directory {str(where)!r} is not a local directory"
        if os.stat(where).st_mode & stat.S_IWOTH:
            return None, (
                f"jax's cache directory {str(where)!r} is writable by every user: anyone could "
                "put executables there (give jax a directory only its users may write)"
            )
        return str(where), None
    if cc is not None and getattr(cc, "_cache_initialized", False):
        try:  # this jax fixed "no cache" for the process at its first compile
            cc.reset_cache()
        except Exception:
            return None, (
                "jax initialised its compilation cache without a directory in this process "
                "and it could not be reset: set jax_compilation_cache_dir before the first "
                "compile"
            )
    with _lock:
        if not _private:
            _private.append(tempfile.mkdtemp(prefix="jaxport-jax-cache-"))
            atexit.register(shutil.rmtree, _private[0], True)
    jax.config.update("jax_compilation_cache_dir", _private[0])
    return _private[0], None


def _made(where: str) -> bool:
    try:
        os.makedirs(where, exist_ok=True)
    except OSError:
        return False
    return True


def cache_hits() -> int:
    """jax's persistent-cache hits in this process since jaxport first asked (a listener on
    ``/jax/compilation_cache/cache_hits``, registered once)."""
    with _lock:
        if not _listening:
            import jax

            def on_event(event: str, **_: Any) -> None:
                if event == "/jax/compilation_cache/cache_hits":
                    _hits[0] += 1

            jax.monitoring.register_event_listener(on_event)
            _listening.append(True)
        return _hits[0]
