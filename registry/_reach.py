"""What a token of the registry server reaches beyond its names: the blobs a commit may name,
and the archives a ``sha256:`` prefix may mean.

Blobs are content-addressed and shared by every name: without a rule, knowing a digest would be
enough to make another team's archive (or a tensor of its model, or its golden examples) a
part of one's own version, and then read it. For a token limited to name prefixes
(``TokenInfo.prefixes``) a blob is *reachable* when

1. it belongs to a version of a name the token may see: a variant's archive, a part of a model
   variant (its skeleton or a tensor: ``variant_parts``), a version's golden examples, or the
   manifest, bundle or a file of a compiled set of a variant's archive (what
   ``GET /compiled/NAME/DIGEST/blobs/BLOB`` serves that token already); or
2. the token uploaded it itself within the last ``UPLOAD_TTL`` seconds: an ``uploads`` row
   (token name, digest), written once the upload's bytes were checked against the digest, so
   the token held them. Token names are never reused (``Tokens.create``), so the key is sound.

Anything else is as if it did not exist, whether the store holds it or not:
``/blobs/missing`` lists it (the client sends its bytes; the store keeps one copy), a commit
that names it is refused as a part that was not uploaded, and no size is ever said. A token
without prefixes reads every name and every blob, so it reaches every blob. The rows live in
the registry's database, so every server process over one database shares them; rows older
than ``UPLOAD_TTL`` are deleted as new ones are written.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import Engine, delete, func, or_, select

from jaxport.registry import _db
from jaxport.registry._models import (
    CompiledFileRow,
    CompiledRow,
    ExamplesRow,
    NameRow,
    UploadRow,
    VariantPartRow,
    VariantRow,
    VersionRow,
)
from jaxport.registry._tokens import TokenInfo

__all__ = ["UPLOAD_TTL", "Reach"]

#: How long, in seconds, a token's upload lets its commits name that part: one day, well past
#: ``gc``'s default ``min_age`` (one hour) that keeps an unreferenced part.
UPLOAD_TTL = 86400.0
#: Digests per ``IN (...)`` clause.
_CHUNK = 500
#: Archives an ambiguous prefix's message names.
_SHOWN = 5


class Reach:
    """The blobs and archives tokens reach, in one registry database (see the module)."""

    def __init__(self, engine: Engine):
        self._engine = engine

    def record_upload(self, token: str, digest: str) -> None:
        """Records that token ``token`` (its name) uploaded the blob ``digest`` now (its bytes
        checked); drops records older than ``UPLOAD_TTL``."""
        now = time.time()
        with _db.translating_db_errors(), _db.write_transaction(self._engine) as conn:
            conn.execute(delete(UploadRow).where(UploadRow.created_at < now - UPLOAD_TTL))
            conn.execute(
                delete(UploadRow).where(UploadRow.token == token, UploadRow.digest == digest)
            )
            _db.insert_ignoring_duplicates(
                conn, UploadRow.__table__,
                [{"token": token, "digest": digest, "created_at": now}], ["token", "digest"],
            )  # fmt: skip

    def reachable(self, principal: TokenInfo, digests: Iterable[str]) -> set[str]:
        """Of ``digests``, those ``principal`` reaches (all of them without prefixes); whether
        the store holds them is not checked."""
        wanted = sorted(set(digests))
        if not principal.prefixes:
            return set(wanted)
        found: set[str] = set()
        cutoff = time.time() - UPLOAD_TTL
        with _db.translating_db_errors(), _db.read_connection(self._engine) as conn:
            for i in range(0, len(wanted), _CHUNK):
                chunk = wanted[i : i + _CHUNK]
                for query in _holders(chunk, principal.prefixes):
                    found.update(conn.execute(query).scalars())
                uploaded = select(UploadRow.digest).where(
                    UploadRow.token == principal.name,
                    UploadRow.created_at >= cutoff,
                    UploadRow.digest.in_(chunk),
                )
                found.update(conn.execute(uploaded).scalars())
        return found

    def visible_archives(self, prefixes: Sequence[str], digest_prefix: str) -> list[str]:
        """The archive digests starting with ``digest_prefix`` that are variants of names
        starting with one of ``prefixes`` (all names without prefixes): at most
        ``_SHOWN + 1``, sorted."""
        query = (
            select(VariantRow.digest)
            .join(NameRow, NameRow.id == VariantRow.model_id)
            .where(VariantRow.digest >= digest_prefix, VariantRow.digest < digest_prefix + "g")
            .distinct()
            .order_by(VariantRow.digest)
            .limit(_SHOWN + 1)
        )
        if prefixes:
            query = query.where(_named(NameRow.name, prefixes))
        with _db.translating_db_errors(), _db.read_connection(self._engine) as conn:
            return list(conn.execute(query).scalars())


def _named(column: Any, prefixes: Sequence[str]) -> Any:
    """``column`` starts with one of ``prefixes``, byte for byte as ``TokenInfo.allows_name``
    compares: its first characters equal the prefix. Not ``LIKE``: SQLite's ignores the case
    of ASCII letters (https://www.sqlite.org/lang_expr.html#like), so ``team-a-`` would reach
    ``TEAM-A-x``'s blobs."""
    return or_(*(func.substr(column, 1, len(p)) == p for p in prefixes))


def _holders(chunk: Sequence[str], prefixes: Sequence[str]) -> list[Any]:
    """Queries of the digests in ``chunk`` that a version of a name in ``prefixes`` holds: as
    a variant's archive, a model variant's part, a version's golden examples, a blob of a
    compiled set of a variant's archive."""
    archives = (
        select(VariantRow.digest)
        .join(NameRow, NameRow.id == VariantRow.model_id)
        .where(VariantRow.digest.in_(chunk), _named(NameRow.name, prefixes))
    )
    parts = (
        select(VariantPartRow.digest)
        .join(VariantRow, VariantRow.id == VariantPartRow.variant_id)
        .join(NameRow, NameRow.id == VariantRow.model_id)
        .where(VariantPartRow.digest.in_(chunk), _named(NameRow.name, prefixes))
    )
    examples = (
        select(ExamplesRow.digest)
        .join(VersionRow, VersionRow.id == ExamplesRow.version_id)
        .join(NameRow, NameRow.id == VersionRow.model_id)
        .where(ExamplesRow.digest.in_(chunk), _named(NameRow.name, prefixes))
    )
    held = [archives.distinct(), parts.distinct(), examples.distinct()]
    return held + _compiled_holders(chunk, prefixes)


def _compiled_holders(chunk: Sequence[str], prefixes: Sequence[str]) -> list[Any]:
    """Queries of the digests in ``chunk`` that a compiled set of an archive of a name in
    ``prefixes`` names: its manifest, its bundle, its files."""
    visible = (
        select(VariantRow.digest)
        .join(NameRow, NameRow.id == VariantRow.model_id)
        .where(_named(NameRow.name, prefixes))
    )
    sets = CompiledRow.digest.in_(visible)
    manifests = select(CompiledRow.manifest_digest).where(
        CompiledRow.manifest_digest.in_(chunk), sets
    )
    bundles = select(CompiledRow.bundle_digest).where(CompiledRow.bundle_digest.in_(chunk), sets)
    files = (
        select(CompiledFileRow.digest)
        .join(CompiledRow, CompiledRow.id == CompiledFileRow.compiled_id)
        .where(CompiledFileRow.digest.in_(chunk), sets)
    )
    return [manifests.distinct(), bundles.distinct(), files.distinct()]
