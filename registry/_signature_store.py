"""``Signatures``: signing the versions of one registry database, listing their signatures and
enforcing a ``SignaturePolicy`` (``registry/_signatures.py`` says what a signature is)."""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Engine, Row, delete, insert, select

from jaxport import SignatureError
from jaxport._signing import Trusted, sign_digest, verify_digest
from jaxport.registry import _db
from jaxport.registry._adoption import already_stored, check_signature, held
from jaxport.registry._blobs import BlobStore, read_verified
from jaxport.registry._model_parts import MODEL, archive_chunks, parts_of
from jaxport.registry._models import BlobRow, SignatureRow
from jaxport.registry._queries import Queries
from jaxport.registry._signatures import Signature, SignatureCheck
from jaxport.registry._types import Ref, VariantInfo

__all__ = ["Signatures"]


class Signatures:
    """Signing versions, listing their signatures, and enforcing a ``SignaturePolicy``."""

    def __init__(self, engine: Engine, blobs: BlobStore, queries: Queries) -> None:
        self._engine = engine
        self._blobs = blobs
        self._queries = queries

    def sign(
        self,
        reference: str,
        private_key: str | os.PathLike[str],
        *,
        password: str | None,
        certificate: str | os.PathLike[str] | None,
        certificate_chain: Sequence[str | os.PathLike[str]],
    ) -> list[Signature]:
        """``Registry.sign``: each variant's archive read and checked against its digest, then
        signed; a signer's earlier signature of the same archive is replaced."""
        ref = self._queries.get(reference)
        made = []
        for variant in ref.variants:
            self._check_bytes(variant)
            signed = sign_digest(
                variant.digest, private_key, password=password, certificate=certificate,
                certificate_chain=certificate_chain,
            )  # fmt: skip
            made.append(self._store(variant.digest, signed.bundle, signed.signer, signed.kind))
        return made

    def of(self, ref: Ref) -> list[Signature]:
        """The signatures stored for the variants of ``ref``, in variant order, oldest first."""
        digests = list(ref.digests)
        with _db.translating_db_errors(), self._engine.connect() as conn:
            rows = conn.execute(
                select(SignatureRow)
                .where(SignatureRow.digest.in_(digests))
                .order_by(SignatureRow.created_at, SignatureRow.id)
            ).all()
            found = [
                Signature(r.digest, r.signer, r.kind, r.created_at, r.bundle_digest) for r in rows
            ]
        return sorted(found, key=lambda s: digests.index(s.digest))

    def check_version(self, ref: Ref, rules: list[tuple[str, tuple[Trusted, ...]]]) -> None:
        """Every variant of ``ref`` meets every rule.

        Raises:
            SignatureError: one does not (the message names the variant and why).
        """
        for variant in ref.variants:
            self.check_variant(variant, rules)

    def check_variant(
        self, variant: VariantInfo, rules: list[tuple[str, tuple[Trusted, ...]]]
    ) -> list[str]:
        """``variant`` meets every rule; a model's parts are read once to check that they make
        the digest signed. Returns the signer that met each rule.

        Raises:
            SignatureError: no signature, none by a key of a rule, or one that does not verify.
            IntegrityError: the archive's bytes do not match its digest.
        """
        if not rules:
            return []
        stored = self._stored(variant.digest)
        signers = [_meet(variant, stored, what, keys) for what, keys in rules]
        if variant.kind == MODEL:
            self._check_bytes(variant)
        return signers

    def verify(self, ref: Ref, keys: Sequence[Trusted]) -> list[SignatureCheck]:
        """Each variant of ``ref``, checked against ``keys`` (``jaxport verify --signatures``)."""
        found = []
        for variant in ref.variants:
            try:
                signer = self.check_variant(variant, [("the keys given", tuple(keys))])[0]
            except SignatureError as e:
                found.append(SignatureCheck(variant, None, str(e)))
            else:
                found.append(SignatureCheck(variant, signer, None))
        return found

    def adopt(
        self, name: str, digest: str, bundle: bytes, signer: str, kind: str
    ) -> tuple[Signature, int | None]:
        """Stores a bundle made elsewhere (a mirror, an OCI pull) of the archive ``digest``
        of a version of ``name`` as ``sign`` stores its own, once checked
        (``registry/_adoption.py``); the same bundle again stores nothing. A policy or
        ``verify`` checks it with the caller's keys. Returns the signature and, where it
        was stored now, the oldest version of ``name`` with that archive (for its event).

        Raises:
            SignatureError: a bundle that is not a model-signing bundle of ``digest`` (over
                ``MAX_BUNDLE_BYTES``, not JSON, another archive's), a signer that is not a
                sha256 fingerprint, a kind other than key or certificate, a certificate
                signature whose certificate is not the signer's or does not verify it.
            ConflictError: the signer has another signature of ``digest`` stored.
            NotFoundError: no version of ``name`` has the archive ``digest``.
        """
        check_signature(digest, bundle, signer, kind)
        with _db.translating_db_errors(), self._engine.connect() as conn:
            version = held(conn, name, [digest])[digest]
        stored = self._stored(digest)
        mine = [(str(row.signer), str(row.bundle_digest)) for row, _ in stored]
        if already_stored(mine, digest, signer, bundle):
            row = next(row for row, _ in stored if row.signer == signer)
            return Signature(digest, signer, row.kind, row.created_at, row.bundle_digest), None
        return self._store(digest, bundle, signer, kind), version

    def _stored(self, digest: str) -> list[tuple[Row[Any], bytes]]:
        with _db.translating_db_errors(), self._engine.connect() as conn:
            rows = conn.execute(select(SignatureRow).where(SignatureRow.digest == digest)).all()
        return [(r, read_verified(self._blobs, r.bundle_digest)) for r in rows]

    def _store(self, digest: str, bundle: bytes, signer: str, kind: str) -> Signature:
        """Writes the bundle's blob and its row in one write transaction holding the shared
        blob lock, so ``gc`` (exclusive lock) sees both or neither."""
        bundle_digest = hashlib.sha256(bundle).hexdigest()
        now = time.time()
        with _db.translating_db_errors(), _db.write_transaction(self._engine) as conn:
            _db.blob_lock(conn, exclusive=False)
            self._blobs.put(bundle_digest, bundle, replace=True)
            _db.insert_ignoring_duplicates(
                conn,
                BlobRow.__table__,
                [{"digest": bundle_digest, "size": len(bundle), "created_at": now}],
                ["digest"],
            )
            conn.execute(
                delete(SignatureRow).where(
                    SignatureRow.digest == digest, SignatureRow.signer == signer
                )
            )
            row = {"digest": digest, "bundle_digest": bundle_digest, "signer": signer}
            conn.execute(insert(SignatureRow).values(**row, kind=kind, created_at=now))
        return Signature(digest, signer, kind, now, bundle_digest)

    def _check_bytes(self, variant: VariantInfo) -> None:
        """The variant's archive is there and its sha256 is the variant's digest.

        Raises:
            IntegrityError: it is missing or its bytes (a model's parts, joined) do not match.
        """
        if variant.kind != MODEL:
            read_verified(self._blobs, variant.digest)
            return
        from jaxport import IntegrityError

        with _db.translating_db_errors(), self._engine.connect() as conn:
            parts = parts_of(conn, variant.variant_id)
        digest = hashlib.sha256()
        for chunk in archive_chunks(self._blobs, parts, variant.size_bytes):
            digest.update(chunk)
        if digest.hexdigest() != variant.digest:
            raise IntegrityError(
                f"the parts of {variant.name}:{variant.version} make sha256:"
                f"{digest.hexdigest()[:12]}, not its digest sha256:{variant.digest[:12]}",
                expected=variant.digest,
                found=digest.hexdigest(),
            )


def _meet(
    variant: VariantInfo,
    stored: list[tuple[Row[Any], bytes]],
    what: str,
    keys: tuple[Trusted, ...],
) -> str:
    """One rule: a stored bundle verifies with one of ``keys`` over the variant's digest;
    returns its signer."""
    where = f"{variant.name}:{variant.version} (variant sha256:{variant.digest[:12]})"
    accepted = ", ".join(k.short for k in keys)
    candidates = [
        (row, bundle)
        for row, bundle in stored
        if any(k.kind == row.kind == "certificate" or k.fingerprint == row.signer for k in keys)
    ]
    if not candidates:
        signers = ", ".join(row.signer[:12] for row, _ in stored)
        has = f"its signatures are by {signers}" if stored else "it has no signature"
        raise SignatureError(
            f"{where} is not signed by {what} ({accepted}): {has}; sign it with "
            "Registry.sign or `jaxport sign`",
            digest=variant.digest,
        )
    failures = []
    for row, bundle in candidates:
        try:
            verify_digest(bundle, variant.digest, keys)
        except SignatureError as e:
            failures.append(f"signature by {row.signer[:12]}: {e}")
        else:
            return str(row.signer)
    raise SignatureError(
        f"{where}: no signature verifies with {what} ({accepted}): {'; '.join(failures)}",
        digest=variant.digest,
    )
