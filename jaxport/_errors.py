"""The one exception hierarchy of jaxport.

Every error jaxport raises on bad input is one of these; errors of the libraries underneath
(struct, flatbuffers, zstandard, ...) are translated where they are raised and never reach a
caller raw. Each class also inherits the matching built-in, so ``except ValueError`` keeps
working for code that does not know jaxport::

    JaxportError
    ├── CorruptArchiveError (ValueError)       bytes that are not a well-formed archive
    │   └── IntegrityError                     a sha256 digest does not match its bytes
    ├── UnsupportedVersionError (ValueError)   a format or calling-convention version out of range
    │   └── NewerFormatError                   written by a newer jax: a module's StableHLO is
    │                                          newer than the installed jaxlib reads
    ├── OutsideJaxWindowError (ValueError)     refused by ``outside_window="refuse"``: written by
    │                                          a jax past jax's 6-month compatibility window
    ├── UnsupportedFeatureError (ValueError)   an Exported, or part of one, that cannot be
    │   │                                      written or read by this jax / jaxport
    │   ├── MissingExtraError                  a capability whose optional extra is not
    │   │                                      installed (``pip install 'jaxport[EXTRA]'``)
    │   ├── MissingCustomCallError             calling or compiling a module that calls a
    │   │                                      custom-call target this jaxlib does not provide
    │   └── UnsafeArchiveError                 a module calls custom-call targets that loading
    │       │                                  refuses (not allowed by name, or host callbacks)
    │       └── UnsafeModuleError              the module sandbox's worker crashed or hung on a
    │                                          module: it is never parsed in the caller
    ├── ParamsMismatchError (ValueError)       new parameters of another tree, shape or dtype
    │                                          than the model's methods take
    ├── RunError (ValueError)                  a model's method cannot be called as asked (by
    │                                          ``jaxport run`` or from Python): no such method,
    │                                          inputs that do not fit it, a call jax refuses
    ├── TimeLimitError (TimeoutError)          a call jaxport runs for a user in a child process
    │                                          (``jaxport run --timeout``) did not end within
    │                                          its time limit: the child was killed
    ├── InvalidArgumentError (TypeError)       an argument of a type the function does not take
    │                                          (``Model.from_orbax(subtree=3)``)
    ├── AuditError                             an audit could not be carried out at all (its
    │   │                                      worker did not start); failures of an archive
    │   │                                      are findings, not errors
    │   └── PackageIndexError                  the package index the jax-release watcher reads
    │                                          cannot be reached, or answered outside PEP 691
    │                                          or its limits (HTTP 502 through a server)
    ├── WebhookError                           a webhook receiver did not take an event after
    │                                          its retries (``jaxport watch --webhook``)
    ├── SignatureError                         an artifact is not signed as required: no
    │                                          signature, one by another key, one that does not
    │                                          verify (a file or a registry version)
    └── RegistryError                          the registry cannot do what was asked
        ├── NotFoundError (LookupError)        no such name, version, alias or matching variant
        ├── InvalidNameError (ValueError)      a name, alias or reference that is not allowed
        ├── ConflictError                      refused: e.g. deleting a version an alias points at
        │   └── GateError                      a protected alias's move to a version that fails
        │                                      its gates (every failed gate in ``.failures``)
        ├── DuplicateVariantError (ValueError) a push whose variants are the same archive, or
        │                                      share a platform and device count
        ├── SchemaVersionError                 the database schema is older or newer than jaxport's
        ├── PermissionDeniedError (PermissionError)  a registry server refused a token's
        │   │                                  request: its scopes or name prefixes do not allow it
        │   └── AuthenticationError            no token, or one that is unknown, expired or revoked
        ├── ServerUnavailableError             a registry server cannot be reached or keeps
        │                                      answering 503 (after retries)
        ├── OciError                           an OCI registry or bundle (image layout) answered
        │                                      or holds what jaxport refuses: a manifest over its
        │                                      limit or malformed, a redirect to another host
        └── WrongKindError (TypeError)         a model pulled as a function, or a function as a
                                               model (also by ``jaxport run``): the message
                                               names the call to use

One warning class, for what loads but is worth knowing::

    JaxportWarning (UserWarning)
    └── OutsideJaxWindowWarning                loaded an archive that jax's own 6-month window
                                               no longer covers (``outside_window="warn"``)
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AuditError",
    "AuthenticationError",
    "ConflictError",
    "CorruptArchiveError",
    "DuplicateVariantError",
    "GateError",
    "IntegrityError",
    "InvalidArgumentError",
    "InvalidNameError",
    "JaxportError",
    "JaxportWarning",
    "MissingCustomCallError",
    "MissingExtraError",
    "NewerFormatError",
    "NotFoundError",
    "OciError",
    "OutsideJaxWindowError",
    "OutsideJaxWindowWarning",
    "PackageIndexError",
    "ParamsMismatchError",
    "PermissionDeniedError",
    "RegistryError",
    "RunError",
    "SchemaVersionError",
    "ServerUnavailableError",
    "SignatureError",
    "TimeLimitError",
    "UnsafeArchiveError",
    "UnsafeModuleError",
    "UnsupportedFeatureError",
    "UnsupportedVersionError",
    "WebhookError",
    "WrongKindError",
]


class JaxportError(Exception):
    """Base class of every error raised by jaxport."""


class CorruptArchiveError(JaxportError, ValueError):
    """The bytes are not a well-formed jaxport archive.

    Attributes:
        offset: byte offset in the archive where the problem was found, when known.
        path: the file read, when the archive came from a file.
    """

    def __init__(self, message: str, *, offset: int | None = None, path: str | None = None):
        self.offset = offset
        self.path = path
        where = []
        if path is not None:
            where.append(str(path))
        if offset is not None:
            where.append(f"at byte {offset}")
        super().__init__(f"{message} ({', '.join(where)})" if where else message)


class IntegrityError(CorruptArchiveError):
    """A sha256 digest does not match the bytes it covers.

    Attributes:
        expected: the digest recorded (hex).
        found: the digest of the bytes read (hex), or None when the bytes are missing.
    """

    def __init__(
        self,
        message: str,
        *,
        expected: str | None = None,
        found: str | None = None,
        offset: int | None = None,
        path: str | None = None,
    ):
        self.expected = expected
        self.found = found
        super().__init__(message, offset=offset, path=path)


class UnsupportedVersionError(JaxportError, ValueError):
    """A version is outside the range this reader or writer supports.

    Attributes:
        what: which version, e.g. ``"archive format version"`` or ``"calling convention version"``.
        found_version: the version found (a StableHLO version string for a
            ``NewerFormatError``).
        supported: ``(minimum, maximum)`` supported, inclusive (strings for a
            ``NewerFormatError``: ``("", newest StableHLO)``).
    """

    def __init__(self, what: str, found_version: int, supported: tuple[int, int], hint: str = ""):
        self.what = what
        self.found_version: int | str = found_version
        self.supported: tuple[int, int] | tuple[str, str] = supported
        lo, hi = supported
        message = f"{what} {found_version} is not supported: this reader supports {lo} to {hi}"
        super().__init__(f"{message}. {hint}" if hint else message)


class NewerFormatError(UnsupportedVersionError):
    """An archive written by a newer jax than the one installed, in a form this one cannot read:
    a module whose StableHLO version is newer than the installed jaxlib's, or one MLIR cannot
    parse in an archive whose header says a newer jax wrote it.

    Attributes:
        writer_jax: the jax version the archive's header names ("" when it names none).
        installed_jax: the running jax's version.
        module_stablehlo: the module's StableHLO version ("" when it declares none).
        installed_stablehlo: the newest StableHLO version the installed jaxlib reads.
    """

    def __init__(
        self,
        message: str,
        *,
        writer_jax: str,
        installed_jax: str,
        module_stablehlo: str,
        installed_stablehlo: str,
    ):
        self.what = "StableHLO version"
        self.found_version = module_stablehlo
        self.supported = ("", installed_stablehlo)
        self.writer_jax = writer_jax
        self.installed_jax = installed_jax
        self.module_stablehlo = module_stablehlo
        self.installed_stablehlo = installed_stablehlo
        JaxportError.__init__(self, message)


class OutsideJaxWindowError(JaxportError, ValueError):
    """Refused (``outside_window="refuse"``): the archive was written by a jax release more
    than 6 months before the running jax's, outside jax's backward-compatibility window
    (``jaxport._window``).

    Attributes:
        window: the archive's ``JaxWindow`` (producer, dates, the running jax).
        path: the file read, when the archive came from a file.
    """

    def __init__(self, message: str, *, window: Any, path: str | None = None):
        self.window = window
        self.path = path
        super().__init__(message)


class UnsupportedFeatureError(JaxportError, ValueError):
    """An Exported, or a part of one, that this jax or jaxport cannot write or read.

    For example a pytree node type that is not registered for serialization, an effect without
    a nullary constructor, a dtype the running jax does not know, or a ``vjp_order`` higher than
    the Exported has VJPs for.
    """


class MissingExtraError(UnsupportedFeatureError):
    """A capability whose optional dependencies (a setuptools extra) are not installed: the
    message names the capability and the command that installs it, e.g. ``the registry
    server's client needs httpx: pip install 'jaxport[client]'`` (``jaxport/_extras.py``).

    Attributes:
        extra: the extra to install (``client``, ``server``, ``s3``, ``postgres``, ``queue``,
            ``signing``, ``orbax``, ``safetensors``).
        module: the top-level module that could not be imported.
    """

    def __init__(self, message: str, *, extra: str, module: str):
        self.extra = extra
        self.module = module
        super().__init__(message)


class MissingCustomCallError(UnsupportedFeatureError):
    """Calling or compiling a loaded function whose module calls a custom-call target that the
    running jaxlib does not provide (no handler registered for it on the platform).

    Loading accepts such a module (the target was allowed: see ``stable_custom_call_targets``);
    only its use fails, translated from jax's ``JaxRuntimeError`` at ``Exported.call`` (and
    reported as a finding by an audit).

    Attributes:
        targets: the missing targets (as jax's error names them).
        fun_name: the function called.
    """

    def __init__(self, message: str, *, targets: tuple[str, ...], fun_name: str):
        self.targets = targets
        self.fun_name = fun_name
        super().__init__(message)


class UnsafeArchiveError(UnsupportedFeatureError):
    """A module of the archive calls custom-call targets that loading refuses.

    As ``jax.export`` does when exporting (``_check_module``), a reader accepts only the targets
    jax guarantees stable (``jaxport.export.stable_custom_call_targets()``) and those the caller
    names in ``allow_custom_calls``. Host-callback targets
    (``jaxport.export.HOST_CALLBACK_TARGETS``) are refused even when named: their operands are
    an index or pointer into the writer's process, and a forged one crashes the reader's.

    Attributes:
        targets: the refused targets, sorted.
        vjp_order: which module calls them: 0 for the primal, ``n`` for the VJP of order ``n``.
        path: the file read, when the archive came from a file.
    """

    def __init__(
        self,
        message: str,
        *,
        targets: tuple[str, ...],
        vjp_order: int,
        path: str | None = None,
    ):
        self.targets = targets
        self.vjp_order = vjp_order
        self.path = path
        super().__init__(f"{message} ({path})" if path is not None else message)


class UnsafeModuleError(UnsafeArchiveError):
    """A module that the sandbox could not parse safely: its worker process crashed (a signal,
    its memory limit) or did not answer within its time limit. The module is never parsed in
    the calling process; ``jaxport.load(path, trusted=True)`` skips the sandbox for one's own
    files.

    Attributes:
        section: the archive section the module is in.
        what: what happened to the worker (``"killed by SIGSEGV"``, ``"no answer within 20 s"``).
        targets: empty; vjp_order, path: as ``UnsafeArchiveError``.
    """

    def __init__(
        self,
        message: str,
        *,
        section: int,
        what: str,
        vjp_order: int = 0,
        path: str | None = None,
    ):
        self.section = section
        self.what = what
        super().__init__(message, targets=(), vjp_order=vjp_order, path=path)


class ParamsMismatchError(JaxportError, ValueError):
    """Parameters that do not fit a model's methods; the message names the first differing path."""


class RunError(JaxportError, ValueError):
    """A model's method cannot be called as asked, by ``jaxport run`` or from Python
    (``model.logits(x)``): the model has no such method, the inputs are not an ``.npz`` of
    arrays or do not fit the method (structure, number, dtype, shape: the message names the
    argument, what it takes and what was given), or jax refused the call here (a platform or
    device count the method was not exported for). A function archive given to ``run`` is a
    ``WrongKindError``."""


class TimeLimitError(JaxportError, TimeoutError):
    """A call jaxport runs for a user in a child process (``jaxport run``'s method call) did
    not end within its time limit; the child was killed (``jaxport/_children.py``).

    Attributes:
        seconds: the time limit, in seconds.
    """

    def __init__(self, message: str, *, seconds: float):
        self.seconds = seconds
        super().__init__(message)


class InvalidArgumentError(JaxportError, TypeError):
    """An argument of a type the function does not take, e.g. ``Model.from_orbax(dir, fn,
    specs, subtree=3)``: the message names the argument, what it takes and what was given."""


class AuditError(JaxportError):
    """An audit could not be carried out: e.g. the worker process did not start in the given
    Python environment. What an archive fails on is a finding (``jaxport.Finding``), not this."""


class PackageIndexError(AuditError):
    """The package index the jax-release watcher reads (PEP 691's JSON simple API) cannot be
    reached, or answered what jaxport refuses: an error status, another content type or API
    version, more than its size limit, a page that does not parse. Through a registry server
    it is an HTTP 502 (the server's upstream failed, not the server). The message names the
    index without its user info or query."""


class WebhookError(JaxportError):
    """A webhook receiver did not take an event after its retries (a connection error, or a
    status other than 2xx each time): raised by ``jaxport watch --webhook`` once the others
    are delivered, the watch recorded and its report printed. The message names each such
    receiver by its scheme, host and port only (a hook URL's path or query may be its
    secret)."""


class SignatureError(JaxportError):
    """An artifact is not signed as a policy or a caller requires: it has no signature, its
    signatures are by other keys, or one does not verify (a bundle that is not a valid Sigstore
    bundle of ``model-signing``, a signature over other bytes, a certificate that does not lead
    to a trusted one). Also: a signing key that cannot be read. Refused by ``jaxport.verify_file``
    and, under ``Registry(require_signatures=...)``, by pulls and alias moves.

    Attributes:
        digest: the sha256 (hex) of the archive concerned, when known.
    """

    def __init__(self, message: str, *, digest: str | None = None):
        self.digest = digest
        super().__init__(message)


class RegistryError(JaxportError):
    """The registry cannot do what was asked (also: a database error, translated)."""


class NotFoundError(RegistryError, LookupError):
    """No such name, version or alias, or no variant matches; the message lists what exists."""


class InvalidNameError(RegistryError, ValueError):
    """A name, alias or reference that is not allowed (the message says which rule it breaks)."""


class ConflictError(RegistryError):
    """Refused because of the registry's state, e.g. deleting a version an alias points at."""


class GateError(ConflictError):
    """A move of a protected alias to a version that fails its gates (``Registry.protect``):
    refused, nothing moved (HTTP 409). Gates are read from stored facts (findings, signatures,
    golden examples), so a gate that fails is met by auditing, signing or pushing examples.

    Attributes:
        failures: every failed gate, as ``(gate, reason)`` pairs: gate ``signature``,
            ``audit`` (one pair per platform x jax release that fails) or ``goldens``.
        version: the version the alias was to move to (a push with ``aliases=`` stored it).
    """

    def __init__(
        self, message: str, *, failures: tuple[tuple[str, str], ...], version: int | None = None
    ):
        self.failures = failures
        self.version = version
        super().__init__(message)


class DuplicateVariantError(RegistryError, ValueError):
    """A push whose variants ``pull`` could not tell apart: two are the same archive (one
    digest), or two share a platform and a device count, so a pull for that platform and
    count would pick one of them without a word. Nothing is stored.

    Attributes:
        variants: the two variants, as the message names them (a path, else ``variant N``
            counted from 1 in the order given, with its short digest).
    """

    def __init__(self, message: str, *, variants: tuple[str, str]):
        self.variants = variants
        super().__init__(message)


class SchemaVersionError(RegistryError):
    """The database's schema revision does not match this jaxport's.

    Attributes:
        found: the database's alembic revision (None for an unknown one).
        expected: the revision this jaxport writes.
    """

    def __init__(self, message: str, *, found: str | None, expected: str):
        self.found = found
        self.expected = expected
        super().__init__(message)


class PermissionDeniedError(RegistryError, PermissionError):
    """A registry server refused the request: the token's scopes or name prefixes do not allow
    it (HTTP 403).

    Attributes:
        needed: the scope the request needs (``read``, ``write`` or ``admin``), or None where
            a name prefix, not a scope, refused it.
    """

    def __init__(self, message: str, *, needed: str | None = None):
        self.needed = needed
        super().__init__(message)


class AuthenticationError(PermissionDeniedError):
    """No bearer token, or one the server does not know, that expired or was revoked (HTTP
    401). The message never contains the token."""


class ServerUnavailableError(RegistryError):
    """A registry server could not be reached, or answered 503 on every retry."""


class OciError(RegistryError):
    """An OCI registry (distribution spec v1.1) or an OCI image layout (a ``jaxport bundle``)
    holds or answers something jaxport refuses: a manifest or index over its size limit or not
    valid JSON of its media type, a redirect to another host, an error status. Digest mismatches
    are ``IntegrityError``s; absent blobs, manifests and tags ``NotFoundError``s. The message
    never contains a credential."""


class WrongKindError(RegistryError, TypeError):
    """A variant of another kind than asked for: a model archive pulled as an Exported
    (``Registry.pull``) or a function archive as a model (``Registry.pull_model``, or a
    function archive or variant given to ``jaxport run``).

    Attributes:
        found: the variant's kind, ``"function"`` or ``"model"``.
    """

    def __init__(self, message: str, *, found: str):
        self.found = found
        super().__init__(message)


class JaxportWarning(UserWarning):
    """Base class of every warning jaxport emits."""


class OutsideJaxWindowWarning(JaxportWarning):
    """An archive was loaded although jax's 6-month backward-compatibility window no longer
    covers it: jax does not promise to run it (``loads(..., outside_window="warn")``)."""
