"""What a signature or audit findings made elsewhere (a mirror's source, an OCI referrer, a
registry server's client) must be before a registry stores them (``Backend.adopt_signature``
and ``adopt_findings``): checked alike by a direct registry and by a registry server for its
clients, so that neither trusts its caller.

A signature, before anything is stored:

1. a bundle of at most ``MAX_BUNDLE_BYTES``, UTF-8 JSON, a model-signing Sigstore bundle (the
   library's own parser) with a DSSE envelope holding one signature;
2. its in-toto statement names exactly one file, ``"."``, with the archive's sha256 (as
   ``jaxport._signing`` checks on verify): a bundle of another archive is refused;
3. ``signer`` a sha256 fingerprint, ``kind`` ``key`` or ``certificate``; a certificate
   signature's leaf certificate holds the signer's key (its fingerprint is ``signer``) and
   that key verifies the envelope's signature. A key signature's bundle carries a hint of its
   key, never the key, so its signature is checked where trust is decided, with the caller's
   keys (``verify_signatures``, a signature policy), as is a certificate's chain to a CA.

A stored signature is never replaced by an adopted one (``sign`` replaces its own signer's):
the same bundle again stores nothing, another bundle by the same signer of the same archive is
a ``ConflictError``, so a token that may adopt cannot swap a valid signature for a broken one.

Findings: ``audits`` rows of ``FINDING_FIELDS``, each field of its column's type and within its
column's size, ``status`` and ``level`` among the audit's own, ``details_json`` a JSON object
of strings (each check's outcome), numbers finite: a stored finding always reads back
(``audit_results``, the pages).
Both must be about archives of versions of the name given (``held``).
"""

from __future__ import annotations

import base64
import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, func, select

from jaxport import ConflictError, InvalidNameError, NotFoundError, SignatureError
from jaxport._signing import MAX_BUNDLE_BYTES
from jaxport.registry._models import NameRow, VariantRow, VersionRow
from jaxport.registry._types import FINDING_FIELDS

__all__ = [
    "FINDING_FIELDS",
    "MAX_FINDINGS",
    "already_stored",
    "check_findings",
    "check_signature",
    "held",
]

#: Most findings one adoption stores (a client sends more in several).
MAX_FINDINGS = 1000
#: The audit's check levels (``jaxport.audit``'s ``LEVELS``).
_LEVELS = ("full", "static")
#: Characters of each text field: its column's size (``registry/_models.py``: ``AuditRow``);
#: ``reason`` and ``details_json`` are Text, bounded as an OCI findings layer bounds them.
_TEXT = {"level": 20, "jax_version": 40, "jaxlib_version": 40, "platform": 40, "status": 20,
         "reason": 1 << 16, "details_json": 1 << 16}  # fmt: skip
_FINGERPRINT = re.compile(r"[0-9a-f]{64}")
_BUNDLE_MEDIA_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"
_IN_TOTO_PAYLOAD = "application/vnd.in-toto+json"
_IN_TOTO_STATEMENT = "https://in-toto.io/Statement/v1"


def check_signature(digest: str, bundle: bytes, signer: str, kind: str) -> None:
    """Refuses a signature of the archive ``digest`` (hex) that is not what the module's
    doc says.

    Raises:
        SignatureError: any of it (the message says which).
        UnsupportedFeatureError: ``model-signing`` is not installed (``jaxport[signing]``).
    """
    if len(bundle) > MAX_BUNDLE_BYTES:
        raise SignatureError(
            f"a signature bundle of {len(bundle)} bytes (at most {MAX_BUNDLE_BYTES})", digest=digest
        )
    if not isinstance(signer, str) or not _FINGERPRINT.fullmatch(signer):
        raise SignatureError(f"a signer that is not a sha256 fingerprint: {signer!r:.80}")
    if kind not in ("key", "certificate"):
        raise SignatureError(f"a signature kind {kind!r:.40}: key or certificate")
    parsed = _parse(bundle, digest)
    envelope = parsed.dsse_envelope
    if parsed.media_type != _BUNDLE_MEDIA_TYPE or envelope is None or len(envelope.signatures) != 1:
        raise SignatureError(
            "not a model-signing bundle: a Sigstore bundle v0.3 with one DSSE signature",
            digest=digest,
        )
    _check_statement(envelope.payload_type, envelope.payload, digest)
    material = parsed.verification_material
    if kind == "key" and (material.public_key is None or material.x509_certificate_chain):
        raise SignatureError("a key signature's bundle names a public key only", digest=digest)
    if kind == "certificate":
        _check_certificate(material, envelope, signer, digest)


def already_stored(
    stored: Sequence[tuple[str, str]], digest: str, signer: str, bundle: bytes
) -> bool:
    """Whether ``signer``'s signature with these bytes is stored already (``stored``: each
    stored signature's signer and bundle digest, hex).

    Raises:
        ConflictError: ``signer`` has another signature of ``digest`` stored.
    """
    import hashlib

    bundle_digest = hashlib.sha256(bundle).hexdigest()
    for who, stored_digest in stored:
        if who == signer:
            if stored_digest == bundle_digest:
                return True
            raise ConflictError(
                f"sha256:{digest[:12]} has another signature by {signer[:12]}: an adopted "
                "signature never replaces a stored one (sign it again where it is stored)"
            )
    return False


def check_findings(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The rows as ``Findings.adopt`` stores them, each checked (see the module's doc).

    Raises:
        InvalidNameError: more than ``MAX_FINDINGS``, or a row that is not a finding.
    """
    if len(rows) > MAX_FINDINGS:
        raise InvalidNameError(f"at most {MAX_FINDINGS} findings at once, not {len(rows)}")
    out = []
    for i, row in enumerate(rows):
        if not isinstance(row, Mapping) or set(row) != set(FINDING_FIELDS):
            raise InvalidNameError(f"finding {i}: its fields are {', '.join(FINDING_FIELDS)}")
        problem = _finding_problem(row)
        if problem is not None:
            raise InvalidNameError(f"finding {i}: {problem}")
        out.append({k: row[k] for k in FINDING_FIELDS})
    return out


def held(conn: Connection, name: str, digests: Sequence[str]) -> dict[str, int]:
    """The oldest version of ``name`` that has each archive of ``digests``.

    Raises:
        NotFoundError: an archive that no version of ``name`` has (the first; a token's
            other names are never said).
    """
    wanted = sorted(set(digests))
    query = (
        select(VariantRow.digest, func.min(VersionRow.version))
        .join(VersionRow, VersionRow.id == VariantRow.version_id)
        .join(NameRow, NameRow.id == VariantRow.model_id)
        .where(NameRow.name == name, VariantRow.digest.in_(wanted))
        .group_by(VariantRow.digest)
    )
    found = {str(d): int(v) for d, v in conn.execute(query).all()}
    for digest in wanted:
        if digest not in found:
            raise NotFoundError(f"no version of {name!r} has the archive sha256:{digest[:12]}")
    return found


# -- signatures ------------------------------------------------------------------------------


def _parse(bundle: bytes, digest: str) -> Any:
    """The library's bundle object of ``bundle`` (UTF-8 JSON)."""
    try:
        doc = json.loads(bundle.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        doc = None
    if not isinstance(doc, dict):
        raise SignatureError("a signature bundle that is not a JSON object", digest=digest)
    from jaxport._signing import _library

    _library()  # the extra, or UnsupportedFeatureError naming it
    from sigstore_models.bundle import v1 as bundle_pb

    try:
        return bundle_pb.Bundle.from_dict(doc)
    except Exception as e:  # pydantic's validation errors, of any kind
        raise SignatureError(
            f"not a Sigstore bundle: {type(e).__name__}: {_first_line(e)}", digest=digest
        ) from None


def _check_statement(payload_type: str, payload: bytes, digest: str) -> None:
    """The envelope's in-toto statement names one file, ``"."``, with sha256 ``digest``."""
    from model_signing._signing import signing

    try:
        if payload_type != _IN_TOTO_PAYLOAD:
            raise ValueError(f"a payload of type {payload_type!r:.60}")
        statement = json.loads(payload)
        if not isinstance(statement, dict) or statement.get("_type") != _IN_TOTO_STATEMENT:
            raise ValueError("not an in-toto statement v1")
        manifest = signing.dsse_payload_to_manifest(statement)
        named = [
            (r.identifier, r.digest.algorithm, r.digest.digest_hex)
            for r in manifest.resource_descriptors()
        ]
    except Exception as e:  # JSON, the library's KeyError / ValueError on a bad statement
        raise SignatureError(
            f"the bundle's statement cannot be read: {type(e).__name__}: {_first_line(e)}",
            digest=digest,
        ) from None
    if named != [(".", "sha256", digest)]:
        listed = ", ".join(f"{n} {a}:{d[:12]}" for n, a, d in named[:3])
        raise SignatureError(
            f"the bundle signs {listed or 'nothing'}, not one file with sha256:{digest[:12]}",
            digest=digest,
        )


def _check_certificate(material: Any, envelope: Any, signer: str, digest: str) -> None:
    """The leaf certificate's key is ``signer``'s and verifies the envelope's signature over
    its PAE (the library's encoding, or its pre-1.0 one, as its verifier tries them)."""
    from cryptography import x509
    from model_signing._signing import sign_ec_key, sign_sigstore_pb

    from jaxport._signing import fingerprint

    chain = material.x509_certificate_chain
    if chain is None or not chain.certificates:
        raise SignatureError("a certificate signature's bundle holds no certificate", digest=digest)
    try:
        key = x509.load_der_x509_certificate(_raw(chain.certificates[0].raw_bytes)).public_key()
        found = fingerprint(key)
    except (ValueError, TypeError) as e:
        raise SignatureError(f"its leaf certificate cannot be read: {e}", digest=digest) from None
    if found != signer:
        raise SignatureError(
            f"its leaf certificate's key is {found[:12]}, not the signer {signer[:12]}",
            digest=digest,
        )
    sig = _raw(envelope.signatures[0].sig)
    for pae in (sign_sigstore_pb.pae, sign_sigstore_pb.pae_compat):
        try:
            key.verify(sig, pae(envelope.payload), _ecdsa(sign_ec_key, key))  # type: ignore[union-attr, call-arg]
            return
        except Exception:  # InvalidSignature, or a key that is not an EC key
            continue
    raise SignatureError(
        f"its signature does not verify with its own certificate's key ({signer[:12]})",
        digest=digest,
    )


def _ecdsa(sign_ec_key: Any, key: Any) -> Any:
    from cryptography.hazmat.primitives.asymmetric import ec

    return ec.ECDSA(sign_ec_key.get_ec_key_hash(key))


def _raw(value: Any) -> bytes:
    """Bytes of the library's model, which keeps base64 fields as bytes or base64 text."""
    return value if isinstance(value, bytes) else base64.b64decode(value)


# -- findings --------------------------------------------------------------------------------


def _finding_problem(row: Mapping[str, Any]) -> str | None:
    """What is wrong with one finding, or None."""
    if not isinstance(row["digest"], str) or not _FINGERPRINT.fullmatch(row["digest"]):
        return "its digest is not 64 lowercase hex digits"
    for k, limit in _TEXT.items():
        if not isinstance(row[k], str) or len(row[k]) > limit:
            return f"its {k} is not a string of at most {limit} characters"
    if row["status"] not in _statuses() or row["level"] not in _LEVELS:
        return f"its status or level is not one an audit reports ({row['status']!r:.30})"
    try:
        details = json.loads(row["details_json"])
    except (ValueError, RecursionError):
        details = None
    if not isinstance(details, dict) or not all(isinstance(v, str) for v in details.values()):
        return "its details_json is not a JSON object of strings (each check's outcome)"
    for k in ("seconds", "created_at"):
        value = row[k]
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if not number or not math.isfinite(value):
            return f"its {k} is not a finite number"
    devices = row["devices"]
    if devices is not None and (isinstance(devices, bool) or not isinstance(devices, int)
                                or not 0 <= devices < 1 << 31):  # fmt: skip
        return "its devices is not a count or null"
    examples = row["examples_digest"]
    if examples is not None and not (
        isinstance(examples, str) and _FINGERPRINT.fullmatch(examples)
    ):
        return "its examples_digest is not 64 lowercase hex digits or null"
    return None


def _statuses() -> tuple[str, ...]:
    from jaxport.audit import STATUSES

    return tuple(STATUSES)


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0][:200] if text else ""
