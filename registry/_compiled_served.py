"""What a registry server does for its clients' compiled sets (``server/_api_compiled.py``):
store a set whose blobs the client uploaded, list an archive's sets, read one blob of them.

A stored set is checked as the server can check it without the caller's keys: its archive is
one of ``name``'s versions' (else ``NotFoundError``), the manifest blob is the set's own
manifest (``manifest_bytes``), the bundle signs exactly that manifest's sha256 with the
signer's key (``registry/_adoption.py``'s ``check_signature``), and every file's blob has the
sha256 the set names. The client that uses a set verifies all of it again with its own keys
(``registry/_compiled_seed.py``): a server is never trusted for native code.
"""

from __future__ import annotations

import hashlib
from typing import Any

from jaxport import NotFoundError
from jaxport.registry._blobs import read_verified
from jaxport.registry._compiled_store import CompiledStore
from jaxport.registry._compiled_types import CompiledSet, manifest_bytes

__all__ = ["read_set_blob", "sets_on_wire", "store_sent"]


def _store(backend: Any) -> CompiledStore:
    return CompiledStore(backend.engine, backend.blobs)


def _check_held(backend: Any, name: str, digest: str) -> None:
    from jaxport.registry import _db
    from jaxport.registry._adoption import held

    with _db.translating_db_errors(), backend.engine.connect() as conn:
        held(conn, name, [digest])


def store_sent(
    backend: Any, name: str, made: CompiledSet, manifest_digest: str, bundle_digest: str
) -> CompiledSet:
    """Stores ``made`` of an archive of ``name`` from blobs already received.

    Raises:
        NotFoundError: no version of ``name`` has the archive.
        IntegrityError: a blob is missing or not its sha256.
        SignatureError: the manifest is not the set's, or the bundle does not sign it.
    """
    from jaxport import SignatureError
    from jaxport.registry._adoption import check_signature

    _check_held(backend, name, made.digest)
    store = _store(backend)
    manifest = store.read(manifest_digest)
    if manifest != manifest_bytes(made):
        raise SignatureError("the manifest sent is not the compiled set's", digest=made.digest)
    bundle = store.read(bundle_digest)
    check_signature(hashlib.sha256(manifest).hexdigest(), bundle, made.signer or "", "key")
    files = {f.name: read_verified(backend.blobs, f.sha256) for f in made.files}
    return store.store(made, manifest, bundle, files)


def sets_on_wire(backend: Any, name: str, digest: str) -> list[dict[str, Any]]:
    """The sets of the archive ``digest`` of ``name``, as their rows say.

    Raises:
        NotFoundError: no version of ``name`` has the archive.
    """
    from jaxport.registry._wire import to_wire

    _check_held(backend, name, digest)
    return [
        {"set": to_wire(s.made), "bundle_digest": s.bundle_digest}
        for s in _store(backend).sets_of(digest)
    ]


def read_set_blob(backend: Any, name: str, digest: str, blob: str) -> bytes:
    """A manifest, bundle or file of a set of the archive ``digest`` of ``name``.

    Raises:
        NotFoundError: no version of ``name`` has the archive, or no set of it that blob.
        IntegrityError: the blob is missing or corrupt.
    """
    _check_held(backend, name, digest)
    store = _store(backend)
    for s in store.sets_of(digest):
        named = {s.made.manifest_digest, s.bundle_digest, *(f.sha256 for f in s.made.files)}
        if blob in named:
            return store.read(blob)
    raise NotFoundError(f"no compiled set of that archive of {name!r} has the blob {blob[:12]}")
