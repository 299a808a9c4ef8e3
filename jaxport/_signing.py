"""Signatures of archives, with the OpenSSF ``model-signing`` library (``jaxport[signing]``).

What is signed is one archive file: the signature is a Sigstore bundle whose DSSE envelope holds
an in-toto statement of ``model-signing``'s format v1.0 naming one resource, ``"."`` (the file),
with its sha256. That sha256 is the archive's digest (a registry variant's ``digest``), so a
registry signs a variant without writing it to a file, and a bundle made by jaxport verifies with
``model_signing verify key FILE --signature FILE.sig`` and the other way round. Key-based
signing (elliptic-curve keys: P-256, P-384, P-521) and certificate-based signing (a leaf
certificate whose chain must lead to a trusted CA certificate) work offline; keyless Sigstore
signing is not offered.

A signer is named by its *fingerprint*: the sha256 (hex) of its public key's DER
SubjectPublicKeyInfo (for a certificate signature, of the leaf certificate's key).

Bundles are untrusted input: at most ``MAX_BUNDLE_BYTES``; any failure to parse or verify one is
a ``SignatureError``. The library's signature and statement checks are used as they are; jaxport
adds the check that the statement names exactly the one file and its digest.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pathlib
from collections.abc import Sequence
from typing import Any

from jaxport._errors import SignatureError, UnsupportedFeatureError

__all__ = [
    "MAX_BUNDLE_BYTES",
    "SIGNATURE_SUFFIX",
    "Signed",
    "Trusted",
    "file_sha256",
    "load_trusted",
    "sign_digest",
    "sign_file",
    "verify_digest",
    "verify_file",
]

#: The largest bundle read, in bytes (a key bundle is about 1.5 KB, one with a chain a few KB).
MAX_BUNDLE_BYTES = 1 << 20
#: A local file's signature is ``FILE + SIGNATURE_SUFFIX`` unless named.
SIGNATURE_SUFFIX = ".sig"
_EXTRA = 'signing needs the model-signing library: pip install "jaxport[signing]"'
_CHUNK = 1 << 20


@dataclasses.dataclass(frozen=True)
class Trusted:
    """What a signature may lead to: a public key (``kind == "key"``) or CA certificates
    (``kind == "certificate"``, a certificate signature's chain must end in one of them).

    Attributes:
        kind: ``"key"`` or ``"certificate"``.
        fingerprint: a key's fingerprint (sha256 of its DER SubjectPublicKeyInfo, hex); for
            certificates, that of the first certificate's key.
        pem: the PEM bytes.
    """

    kind: str
    fingerprint: str
    pem: bytes = dataclasses.field(repr=False)

    @property
    def short(self) -> str:
        """The first 12 hex digits of the fingerprint."""
        return self.fingerprint[:12]


@dataclasses.dataclass(frozen=True)
class Signed:
    """A bundle made by ``sign_digest``: its JSON bytes, the signer's fingerprint and kind."""

    bundle: bytes = dataclasses.field(repr=False)
    signer: str
    kind: str


def load_trusted(source: str | os.PathLike[str] | bytes, *, check_extra: bool = True) -> Trusted:
    """A public key or CA certificates, from a PEM file's path or the PEM bytes.

    Raises:
        SignatureError: not a PEM public key or certificate (or not readable).
        UnsupportedFeatureError: the signing extra is not installed (``check_extra``; without
            it only ``cryptography`` is imported: a caller that may never verify a bundle,
            such as a compiled-set policy whose verdicts are cached, skips the 0.5-1 s import
            of ``model-signing``).
    """
    if check_extra:
        _library()  # the extra as a whole, or UnsupportedFeatureError naming it
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    pem = source if isinstance(source, bytes) else _read_small(source, "public key")
    try:
        if b"-----BEGIN CERTIFICATE-----" in pem:
            certs = x509.load_pem_x509_certificates(pem)
            return Trusted("certificate", fingerprint(certs[0].public_key()), pem)
        return Trusted("key", fingerprint(serialization.load_pem_public_key(pem)), pem)
    except (ValueError, TypeError) as e:
        raise SignatureError(
            f"{_named(source)} is not a PEM public key or certificate: {e}"
        ) from None


def fingerprint(public_key: Any) -> str:
    """The sha256 (hex) of a public key's DER SubjectPublicKeyInfo."""
    from cryptography.hazmat.primitives import serialization

    der = public_key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return hashlib.sha256(der).hexdigest()


def sign_digest(
    digest: str,
    private_key: str | os.PathLike[str],
    *,
    password: str | None = None,
    certificate: str | os.PathLike[str] | None = None,
    certificate_chain: Sequence[str | os.PathLike[str]] = (),
) -> Signed:
    """A bundle signing the archive whose sha256 is ``digest`` (64 hex digits).

    Args:
        digest: the archive's sha256, hex.
        private_key: a PEM elliptic-curve private key (P-256, P-384 or P-521).
        password: the key's password, if it is encrypted (never shown in a message).
        certificate: a PEM certificate of the key: the bundle then carries it and
            ``certificate_chain`` (intermediates, then the root) and verifies against CA
            certificates instead of the key.

    Raises:
        SignatureError: the key cannot be read (wrong password, not an EC key of those curves),
            or does not match ``certificate``; a certificate without ``certificate_chain`` or
            with a ``password``.
        UnsupportedFeatureError: ``model-signing`` is not installed (``jaxport[signing]``).
    """
    ec_key, cert_signing, signing, _, _ = _library()
    if certificate is not None and (not certificate_chain or password is not None):
        raise SignatureError(
            "a certificate signature needs certificate_chain (the issuing CA's certificates, up "
            "to the root) and an unencrypted key (model-signing reads it without a password)"
        )
    payload = signing.Payload(_manifest(digest))
    try:
        if certificate is None:
            # The library hands the password to cryptography, which takes bytes.
            secret = None if password is None else password.encode()
            signer: Any = ec_key.Signer(pathlib.Path(private_key), secret)
        else:
            signer = cert_signing.Signer(
                pathlib.Path(private_key),
                pathlib.Path(certificate),
                [pathlib.Path(c) for c in certificate_chain],
            )
        public = signer._private_key.public_key()
    except OSError:
        raise
    except Exception as e:  # the library's and cryptography's errors on a bad key or password
        raise SignatureError(
            f"cannot sign with {os.fspath(private_key)!r}: {type(e).__name__}: {_first_line(e)}"
        ) from None
    bundle = signer.sign(payload).bundle.to_json().encode()
    return Signed(bundle, fingerprint(public), "key" if certificate is None else "certificate")


def verify_digest(bundle: bytes, digest: str, trusted: Sequence[Trusted]) -> Trusted:
    """Checks that ``bundle`` signs the archive whose sha256 is ``digest``, by one of
    ``trusted``; returns the one it leads to.

    Raises:
        SignatureError: the bundle is too large or malformed, signs other bytes, or verifies
            with none of ``trusted`` (the message says why for each).
        UnsupportedFeatureError: ``model-signing`` is not installed (``jaxport[signing]``).
    """
    if not trusted:
        raise SignatureError("no public key or certificate to verify with", digest=digest)
    signature = _parse(bundle, digest)
    failures = []
    for candidate in trusted:
        try:
            _check_statement(_verifier(candidate).verify(signature), digest)
        except SignatureError as e:
            failures.append(f"{candidate.kind} {candidate.short}: {e}")
        except Exception as e:  # the library's, cryptography's and OpenSSL's verdicts
            why = _first_line(e) or type(e).__name__
            failures.append(f"{candidate.kind} {candidate.short}: {why}")
        else:
            return candidate
    raise SignatureError(
        f"the signature of sha256:{digest[:12]} does not verify: {'; '.join(failures)}",
        digest=digest,
    )


def sign_file(
    path: str | os.PathLike[str],
    *,
    private_key: str | os.PathLike[str],
    signature: str | os.PathLike[str] | None = None,
    password: str | None = None,
    certificate: str | os.PathLike[str] | None = None,
    certificate_chain: Sequence[str | os.PathLike[str]] = (),
) -> pathlib.Path:
    """Signs a file (an archive, usually) and writes the bundle beside it.

    Args:
        path: the file to sign (a regular file).
        private_key, password, certificate, certificate_chain: see ``sign_digest``.
        signature: where to write the bundle; default ``path + ".sig"`` (replaced atomically).

    Returns:
        The signature's path.

    Raises:
        NotFoundError: ``path`` does not exist or is not a regular file.
        SignatureError, UnsupportedFeatureError: see ``sign_digest``.
    """
    from jaxport._io import atomic_write

    signed = sign_digest(
        file_sha256(path), private_key, password=password, certificate=certificate,
        certificate_chain=certificate_chain,
    )  # fmt: skip
    target = pathlib.Path(signature if signature is not None else _default_signature(path))
    atomic_write(target, [signed.bundle])
    return target


def verify_file(
    path: str | os.PathLike[str],
    *,
    signature: str | os.PathLike[str] | None = None,
    public_key: str | os.PathLike[str] | bytes | Sequence[str | os.PathLike[str] | bytes] = (),
    certificate: str | os.PathLike[str] | bytes | Sequence[str | os.PathLike[str] | bytes] = (),
) -> str:
    """Checks a file's signature: a bundle (``path + ".sig"`` unless named) that signs the
    file's bytes, by one of the public keys or with a certificate leading to one of the CA
    certificates given.

    Returns:
        The signer's fingerprint (sha256 of its public key's DER SubjectPublicKeyInfo, hex).

    Raises:
        SignatureError: no signature file, or it does not verify (see ``verify_digest``);
            no key or certificate given.
        NotFoundError: ``path`` does not exist or is not a regular file.
        UnsupportedFeatureError: ``model-signing`` is not installed (``jaxport[signing]``).
    """
    trusted = [load_trusted(k) for k in _listed(public_key)]
    trusted += [load_trusted(c) for c in _listed(certificate)]
    if not trusted:
        raise SignatureError("verify_file needs public_key= or certificate=")
    where = pathlib.Path(signature if signature is not None else _default_signature(path))
    if not where.is_file():
        raise SignatureError(f"{os.fspath(path)!r} has no signature: no file {str(where)!r}")
    bundle = _read_small(where, "signature")
    return verify_digest(bundle, file_sha256(path), trusted).fingerprint


def file_sha256(path: str | os.PathLike[str]) -> str:
    """The sha256 (hex) of a regular file, read in 1 MiB chunks.

    Raises:
        NotFoundError: no such file, or not a regular file (a FIFO or device never is read).
    """
    import stat

    from jaxport._errors import NotFoundError

    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise NotFoundError(f"no such file: {os.fspath(path)!r}") from None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise NotFoundError(f"{os.fspath(path)!r} is not a regular file")
        digest = hashlib.sha256()
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


# -- the library -----------------------------------------------------------------------------


def _library() -> tuple[Any, Any, Any, Any, Any]:
    """The ``model-signing`` modules used (imported on first use: about 0.4 s)."""
    try:
        from model_signing import manifest
        from model_signing._hashing import hashing
        from model_signing._signing import sign_certificate, sign_ec_key, signing
    except ImportError as e:  # also its undeclared pyOpenSSL
        raise UnsupportedFeatureError(f"{_EXTRA} ({e})") from None
    return sign_ec_key, sign_certificate, signing, manifest, hashing


def _manifest(digest: str) -> Any:
    """The manifest ``model-signing`` makes of one file with this sha256 (``"."``)."""
    _, _, _, manifest, hashing = _library()
    serialization = manifest.SerializationType.from_args(
        {"method": "files", "hash_type": "sha256", "allow_symlinks": False, "ignore_paths": []}
    )
    item = serialization.new_item(".", hashing.Digest("sha256", bytes.fromhex(digest)))
    return manifest.Manifest("archive", [item], serialization)


def _parse(bundle: bytes, digest: str) -> Any:
    """The library's signature object of a bundle's JSON bytes."""
    from model_signing._signing import sign_sigstore_pb
    from sigstore_models.bundle import v1 as bundle_pb

    if len(bundle) > MAX_BUNDLE_BYTES:
        raise SignatureError(
            f"a signature bundle of {len(bundle)} bytes (at most {MAX_BUNDLE_BYTES})",
            digest=digest,
        )
    try:
        return sign_sigstore_pb.Signature(bundle_pb.Bundle.from_dict(json.loads(bundle)))
    except Exception as e:  # JSON and pydantic validation errors
        raise SignatureError(
            f"not a Sigstore bundle: {type(e).__name__}: {_first_line(e)}", digest=digest
        ) from None


def _verifier(trusted: Trusted) -> Any:
    """The library's verifier for a key or CA certificates held in memory (its constructors
    read files; the verification itself is the library's own)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    ec_key, cert_signing, _, _, _ = _library()
    if trusted.kind == "key":
        verifier = ec_key.Verifier.__new__(ec_key.Verifier)
        key = serialization.load_pem_public_key(trusted.pem)
        ec_key._check_supported_ec_key(key)
        verifier._public_key = key
        return verifier
    from OpenSSL import crypto

    verifier = cert_signing.Verifier.__new__(cert_signing.Verifier)
    verifier._log_fingerprints = False
    verifier._store = crypto.X509Store()
    for cert in x509.load_pem_x509_certificates(trusted.pem):
        verifier._store.add_cert(crypto.X509.from_cryptography(cert))
    return verifier


def _check_statement(found: Any, digest: str) -> None:
    """The verified manifest names exactly one file, ``"."``, with sha256 ``digest``."""
    resources = list(found.resource_descriptors())
    named = [(r.identifier, r.digest.algorithm, r.digest.digest_hex) for r in resources]
    if named != [(".", "sha256", digest)]:
        listed = ", ".join(f"{n} {a}:{d[:12]}" for n, a, d in named[:3])
        raise SignatureError(
            f"it signs {listed or 'nothing'}, not one file with sha256:{digest[:12]}",
            digest=digest,
        )


# -- small helpers ---------------------------------------------------------------------------


def _read_small(path: str | os.PathLike[str], what: str) -> bytes:
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_BUNDLE_BYTES + 1)
    except OSError as e:
        raise SignatureError(f"cannot read the {what} {os.fspath(path)!r}: {e.strerror}") from None
    if len(data) > MAX_BUNDLE_BYTES:
        raise SignatureError(f"the {what} {os.fspath(path)!r} is over {MAX_BUNDLE_BYTES} bytes")
    return data


def _listed(value: Any) -> list[Any]:
    if isinstance(value, str | bytes | os.PathLike):
        return [value]
    return list(value)


def _named(source: str | os.PathLike[str] | bytes) -> str:
    return "the PEM bytes given" if isinstance(source, bytes) else repr(os.fspath(source))


def _default_signature(path: str | os.PathLike[str]) -> str:
    return os.fspath(path) + SIGNATURE_SUFFIX


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0][:200] if text else ""
