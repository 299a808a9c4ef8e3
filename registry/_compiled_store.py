"""``CompiledStore``: the compiled sets of one registry database (``compiled`` and
``compiled_files`` rows, their files, manifests and bundles as blobs); what a set is:
``registry/_compiled_types.py``.

Nothing stored is trusted on read: a row only says which blobs to try; ``Registry.use_compiled``
verifies the manifest's bundle with the caller's keys and every file against the manifest.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from collections.abc import Mapping
from typing import Any

from sqlalchemy import Engine, delete, insert, select

from jaxport.registry import _db
from jaxport.registry._blobs import BlobStore, read_verified
from jaxport.registry._compiled_types import CompiledFile, CompiledSet, check_set_files
from jaxport.registry._models import BlobRow, CompiledFileRow, CompiledRow

__all__ = ["CompiledStore", "StoredSet"]

#: Most characters of a row's ``options`` read (a host's compile options take a few hundred).
_MAX_OPTIONS = 64 << 10


@dataclasses.dataclass(frozen=True)
class StoredSet:
    """A stored set as its row says (unverified) and the blob of its bundle."""

    made: CompiledSet
    bundle_digest: str


class CompiledStore:
    """The compiled sets of a database and its blob store."""

    def __init__(self, engine: Engine, blobs: BlobStore) -> None:
        self._engine = engine
        self._blobs = blobs

    def store(
        self, made: CompiledSet, manifest: bytes, bundle: bytes, files: Mapping[str, bytes]
    ) -> CompiledSet:
        """Writes the set's blobs and rows in one write transaction holding the shared blob
        lock (``gc`` sees all or nothing). A set of the same key by the same signer is kept
        as it is (``status == "already stored"``: jax's cache files hold the compile time, so
        two compiles never make the same bytes); one by another signer is replaced. Two
        stores of one key at once queue (``_db.key_lock``): the second finds the first's set.

        Raises:
            InvalidNameError: more than ``MAX_SET_FILES`` files (``check_set_files``).
        """
        check_set_files(made)
        manifest_digest = hashlib.sha256(manifest).hexdigest()
        bundle_digest = hashlib.sha256(bundle).hexdigest()
        now = time.time()
        key = _key(made)
        with _db.translating_db_errors(), _db.write_transaction(self._engine) as conn:
            _db.blob_lock(conn, exclusive=False)
            _db.key_lock(conn, _key_text(made))
            old = conn.execute(select(CompiledRow).where(*key)).first()
            same = old is not None and old.signer == made.signer
            if not same:
                blobs = [(manifest_digest, manifest), (bundle_digest, bundle)]
                blobs += [(f.sha256, files[f.name]) for f in made.files]
                self._put(conn, blobs, now)
                conn.execute(delete(CompiledRow).where(*key))  # its files go by cascade
                row = conn.execute(insert(CompiledRow).values(**_row(made), created_at=now,
                    manifest_digest=manifest_digest, bundle_digest=bundle_digest,
                ).returning(CompiledRow.id)).scalar_one()  # fmt: skip
                conn.execute(insert(CompiledFileRow), [
                    {"compiled_id": row, "name": f.name, "digest": f.sha256, "size": f.size}
                    for f in made.files
                ])  # fmt: skip
        if same:
            assert old is not None
            return dataclasses.replace(
                self._made_of(old), status="already stored", reason="kept the stored set"
            )
        return dataclasses.replace(made, manifest_digest=manifest_digest, status="stored")

    def sets_of(self, digest: str) -> list[StoredSet]:
        """The sets stored for the archive ``digest``, oldest first, as their rows say."""
        with _db.translating_db_errors(), self._engine.connect() as conn:
            rows = conn.execute(
                select(CompiledRow).where(CompiledRow.digest == digest).order_by(CompiledRow.id)
            ).all()
            files = conn.execute(
                select(CompiledFileRow)
                .where(CompiledFileRow.compiled_id.in_([r.id for r in rows]))
                .order_by(CompiledFileRow.name)
            ).all()
        by_set: dict[int, list[CompiledFile]] = {}
        for f in files:
            by_set.setdefault(f.compiled_id, []).append(CompiledFile(f.name, f.digest, f.size))
        return [StoredSet(_made(r, tuple(by_set.get(r.id, ()))), r.bundle_digest) for r in rows]

    def _made_of(self, row: Any) -> CompiledSet:
        with _db.translating_db_errors(), self._engine.connect() as conn:
            files = conn.execute(
                select(CompiledFileRow)
                .where(CompiledFileRow.compiled_id == row.id)
                .order_by(CompiledFileRow.name)
            ).all()
        return _made(row, tuple(CompiledFile(f.name, f.digest, f.size) for f in files))

    def read(self, digest: str, max_size: int | None = None) -> bytes:
        """A blob's bytes, verified against its digest; ``max_size``: the most bytes it may
        have (a longer blob is read no further; None: no limit).

        Raises:
            IntegrityError: missing, corrupt, or over ``max_size`` bytes.
        """
        return read_verified(self._blobs, digest, max_size)

    def _put(self, conn: Any, blobs: list[tuple[str, bytes]], now: float) -> None:
        for digest, data in blobs:
            self._blobs.put(digest, data, replace=True)
        rows = [{"digest": d, "size": len(b), "created_at": now} for d, b in dict(blobs).items()]
        _db.insert_ignoring_duplicates(conn, BlobRow.__table__, rows, ["digest"])


def _key(made: CompiledSet) -> list[Any]:
    """The rows of ``made``'s key (``_compiled_types.same_key`` compares two sets')."""
    return [
        CompiledRow.digest == made.digest,
        CompiledRow.method == made.method,
        CompiledRow.platform == made.platform,
        CompiledRow.device_kind == made.device_kind,
        CompiledRow.jax_version == made.jax_version,
        CompiledRow.jaxlib_version == made.jaxlib_version,
        CompiledRow.options_digest == _options_digest(made.options),
    ]


def _key_text(made: CompiledSet) -> str:
    """``made``'s key as text, for ``_db.key_lock``."""
    fields = ("digest", "method", "platform", "device_kind", "jax_version", "jaxlib_version")
    key = [getattr(made, f) for f in fields] + [_options_digest(made.options)]
    return "compiled " + json.dumps(key)


def _row(made: CompiledSet) -> dict[str, Any]:
    fields = ("digest", "method", "platform", "device_kind", "jax_version", "jaxlib_version",
              "nr_devices", "signer")  # fmt: skip
    row = {f: getattr(made, f) for f in fields}
    row["options"] = json.dumps(dict(made.options), sort_keys=True)
    row["options_digest"] = _options_digest(made.options)
    return row


def _made(row: Any, files: tuple[CompiledFile, ...]) -> CompiledSet:
    try:
        if len(row.options) > _MAX_OPTIONS:
            raise ValueError("options too long")
        options = {str(k): str(v) for k, v in json.loads(row.options).items()}
    except (ValueError, AttributeError, TypeError, RecursionError):
        options = {}  # a row is only a hint: the signed manifest is what is checked
    return CompiledSet(
        row.digest, row.method, row.platform, row.device_kind, row.jax_version,
        row.jaxlib_version, row.nr_devices, options, files, row.manifest_digest, row.signer,
    )  # fmt: skip


def _options_digest(options: Mapping[str, str]) -> str:
    from jaxport._compiled_host import options_digest

    return options_digest(dict(options))
