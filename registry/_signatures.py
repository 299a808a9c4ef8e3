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
database holds) by reading its parts once and hashing them. The signatures of a database are
``registry/_signature_store.py``; this module imports no database library.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Mapping

from jaxport import SignatureError
from jaxport._signing import Trusted, load_trusted
from jaxport.registry._names import check_name, parse_reference
from jaxport.registry._types import VariantInfo

__all__ = ["KeySource", "Signature", "SignatureCheck", "SignaturePolicy", "alias_of"]

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


def alias_of(reference: str) -> str | None:
    """The alias a ``NAME@ALIAS`` reference names (None for others)."""
    return parse_reference(reference).alias


def _loaded(keys: Iterable[KeySource], what: str) -> tuple[Trusted, ...]:
    if isinstance(keys, str | bytes | os.PathLike):
        keys = [keys]
    loaded = tuple(load_trusted(k) for k in keys)
    if what != "keys" and not loaded:
        raise SignatureError(f"SignaturePolicy {what} lists no key")
    return loaded
