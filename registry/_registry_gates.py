"""``Registry``'s protected aliases: ``protect``, ``unprotect``, ``gates``, ``check_gates``
(argument checks here, the work in the backend; ``registry/_gates.py`` says what a gate is).
A mixin of ``Registry`` (``registry/_registry.py``)."""

from __future__ import annotations

import builtins
import os
import re
from collections.abc import Iterable

from jaxport.registry._backend import Backend
from jaxport.registry._gate_types import AliasGates, GateCheck, check_gate_spec
from jaxport.registry._names import check_name, check_version

__all__ = ["RegistryGates", "signer_of"]

_FINGERPRINT = re.compile(r"[0-9a-fA-F]{64}")


class RegistryGates:
    """``Registry``'s protected aliases (see ``Registry``)."""

    _backend: Backend

    def protect(
        self,
        name: str,
        alias: str,
        *,
        require_signature: str | os.PathLike[str] | bytes | None = None,
        require_audit: str | None = None,
        jax: Iterable[str] | str = (),
        platforms: Iterable[str] | str = (),
        require_goldens: bool = False,
    ) -> AliasGates:
        """Protects ``name@alias`` with gates (replacing any it had): every later move of it
        to a version (``alias``, ``push(aliases=)``) is refused unless the version passes
        them all, as stored findings, signatures and examples say (nothing is compiled).
        Recorded as a ``protect`` event. Through a server: an admin token without name
        prefixes.

        Example::

            reg.protect("vision", "prod", require_signature="release.pub",
                        require_audit="ok", jax=["0.11.2", "0.12.0"],
                        platforms=["cuda", "tpu"], require_goldens=True)

        Args:
            name: the name; alias: the alias (it need not exist yet).
            require_signature: every variant signed by this signer: its fingerprint (64 hex
                digits, sha256 of its public key's DER SubjectPublicKeyInfo, as ``show``
                lists signatures) or its PEM public key or certificate (a path or bytes).
            require_audit: ``"ok"``: for each platform of ``platforms`` (empty: every
                platform of the version) and each release of ``jax`` (empty: any), a variant
                for that platform whose newest measured finding there is ``ok``.
            jax: jax releases of the audit gate (a list, or comma-separated).
            platforms: platforms of the audit gate (a list, or comma-separated).
            require_goldens: the version holds golden examples.

        Raises:
            InvalidNameError: no gate, a malformed fingerprint, release or platform, or
                ``jax``/``platforms`` without ``require_audit``.
            SignatureError: ``require_signature`` is a file that is not a PEM key or
                certificate.
            NotFoundError: no such name.
            PermissionDeniedError: through a server, a token that is not an admin without
                name prefixes.
        """
        check_name(name)
        check_name(alias, "alias")
        spec = check_gate_spec(
            {
                "require_signature": signer_of(require_signature),
                "require_audit": require_audit,
                "jax_releases": jax,
                "platforms": platforms,
                "require_goldens": require_goldens,
            }
        )
        self._backend.check_writable()
        return self._backend.protect(name, alias, spec)

    def unprotect(self, name: str, alias: str) -> None:
        """Removes ``name@alias``'s gates (a ``unprotect`` event). Through a server: an admin
        token without name prefixes.

        Raises:
            NotFoundError: no such name, or the alias is not protected.
            PermissionDeniedError: through a server, a token that is not an admin without
                name prefixes.
        """
        check_name(name)
        check_name(alias, "alias")
        self._backend.check_writable()
        self._backend.unprotect(name, alias)

    def gates(self, name: str) -> builtins.list[GateCheck]:
        """``name``'s protected aliases, in alias order, each with its gates evaluated for the
        version it points at now (``GateCheck.version`` None: it points nowhere yet).

        Raises:
            NotFoundError: no such name.
        """
        check_name(name)
        return self._backend.gates(name)

    def check_gates(self, name: str, alias: str, version: int) -> GateCheck | None:
        """Whether ``version`` passes ``name@alias``'s gates, evaluated now as a move would
        (None: the alias is not protected); nothing moves.

        Raises:
            NotFoundError: no such name or version.
        """
        check_name(name)
        check_name(alias, "alias")
        check_version(version)
        return self._backend.check_gates(name, alias, version)


def signer_of(source: str | os.PathLike[str] | bytes | None) -> str | None:
    """A ``require_signature`` value as the fingerprint gates store: 64 hex digits as they
    are (lower case); a PEM public key or certificate (path or bytes) as its fingerprint.

    Raises:
        SignatureError: a file or bytes that are not a PEM public key or certificate.
        InvalidNameError: a string that is neither a fingerprint nor an existing file.
    """
    if source is None:
        return None
    if isinstance(source, str) and _FINGERPRINT.fullmatch(source.strip()):
        return source.strip().lower()
    if isinstance(source, str) and not os.path.isfile(source):
        from jaxport import InvalidNameError

        raise InvalidNameError(
            f"require_signature {source!r:.80} is neither a fingerprint (64 hex digits) nor a "
            "PEM public key or certificate file"
        )
    from jaxport._signing import load_trusted

    return load_trusted(source).fingerprint
