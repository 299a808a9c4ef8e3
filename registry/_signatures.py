"""Signatures in the registry: Sigstore bundles beside the versions they sign, and the policy
that refuses unsigned versions (``Registry(require_signatures=SignaturePolicy(...))``).

A signature belongs to an archive's digest, not to a version (like an OCI referrer, whose
subject is a digest): a variant is signed by a key when a stored bundle verifies with that key
over the variant's digest (``jaxport._signing``); a version is, when every variant is. The
bundle is a blob (content-addressed, read verified) with a ``signatures`` row; ``gc`` keeps it
while its row exists and forgets the rows of archives no variant holds.

Nothing stored is trusted: a row's ``signer`` only chooses which bundles to try; the bundle
verifies with a key the caller gives, and the bytes pulled are checked against the digest it
signs: a function's archive by its blob's digest; a model's (stored in parts, whose list the
database holds) by reading its parts once and hashing them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import Engine, Row, delete, insert, select

from jaxport import SignatureError
from jaxport._signing import Trusted, load_trusted, sign_digest, verify_digest
from jaxport.registry import _db
from jaxport.registry._blobs import BlobStore, read_verified
from jaxport.registry._model_parts import MODEL, archive_chunks, parts_of
from jaxport.registry._models import BlobRow, SignatureRow
from jaxport.registry._names import check_name, parse_reference
from jaxport.registry._queries import Queries
from jaxport.registry._types import Ref, VariantInfo

__all__ = ["Signature", "SignatureCheck", "SignaturePolicy", "Signatures", "alias_of"]

KeySource = str | os.PathLike[str] | bytes


@dataclasses.dataclass(frozen=True)
class Signature:
    """A stored signature of one variant's archive (listed as stored: not verified).

    Attributes:
        digest: the archive's sha256 (hex), the variant's digest.
        signer: the signer's fingerprint: sha256 (hex) of its public key's DER
            SubjectPublicKeyInfo (``jaxport._signing.fingerprint``).
        kind: ``"key"`` or ``"certificate"``.
        created_at: when it was stored (unix seconds).
        bundle_digest: the sha256 (hex) of the Sigstore bundle's blob.
    """

    digest: str
    signer: str
    kind: str
    created_at: float
    bundle_digest: str

    @property
    def short_signer(self) -> str:
        """The first 12 hex digits of ``signer``."""
        return self.signer[:12]


@dataclasses.dataclass(frozen=True)
class SignatureCheck:
    """Whether a variant is signed by one of the keys given (``Registry.verify_signatures``).

    Attributes:
        variant: the variant checked.
        signer: the fingerprint of the signer whose signature verified, or None.
        reason: why none verified (no signature, other signers, one that does not verify), or
            None when one did.
    """

    variant: VariantInfo
    signer: str | None
    reason: str | None

    @property
    def ok(self) -> bool:
        """A signature verified."""
        return self.reason is None


class SignaturePolicy:
    """Which keys must sign what the registry hands out.

    Examples::

        SignaturePolicy(keys=["release.pub"])                # every pull, every alias move
        SignaturePolicy(aliases={"prod": ["release.pub"]})   # only NAME@prod (pull and move)

    A key is a PEM public key (P-256, P-384 or P-521) or PEM CA certificates (a certificate
    signature must lead to one), as a path or the PEM bytes. A rule is met by a signature of any
    one of its keys; where ``keys`` and an alias rule both apply, both must be met.

    Args:
        keys: every version pulled (``pull``, ``pull_model``, ``pull_bytes``, ``pull_file``) or
            given an alias must be signed by one of these.
        aliases: alias -> keys: a version may be given that alias (``alias``, ``push(aliases=)``)
            and pulled through it (``NAME@ALIAS``) only when signed by one of its keys.

    Raises:
        SignatureError: a key that is not a PEM public key or certificate; a rule without keys.
        InvalidNameError: a malformed alias.
    """

    def __init__(
        self, keys: Iterable[KeySource] = (), *, aliases: Mapping[str, Iterable[KeySource]] = {}
    ) -> None:
        self.keys: tuple[Trusted, ...] = _loaded(keys, "keys")
        self.aliases: dict[str, tuple[Trusted, ...]] = {
            check_name(a, "alias"): _loaded(k, f"aliases[{a!r}]") for a, k in aliases.items()
        }
        if not self.keys and not self.aliases:
            raise SignatureError("a SignaturePolicy needs keys or aliases")

    def __repr__(self) -> str:
        def short(keys: tuple[Trusted, ...]) -> str:
            return "[" + ", ".join(k.short for k in keys) + "]"

        rules = {a: short(k) for a, k in self.aliases.items()}
        return f"SignaturePolicy(keys={short(self.keys)}, aliases={rules})"

    def rules(self, alias: str | None) -> list[tuple[str, tuple[Trusted, ...]]]:
        """The rules for a pull through ``alias`` (None: by version or digest) or a move of it:
        (what the rule is, its keys)."""
        found = [("the registry's keys", self.keys)] if self.keys else []
        if alias is not None and alias in self.aliases:
            found.append((f"@{alias}'s keys", self.aliases[alias]))
        return found


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


def alias_of(reference: str) -> str | None:
    """The alias a ``NAME@ALIAS`` reference names (None for others)."""
    return parse_reference(reference).alias


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


def _loaded(keys: Iterable[KeySource], what: str) -> tuple[Trusted, ...]:
    if isinstance(keys, str | bytes | os.PathLike):
        keys = [keys]
    loaded = tuple(load_trusted(k) for k in keys)
    if what != "keys" and not loaded:
        raise SignatureError(f"SignaturePolicy {what} lists no key")
    return loaded
