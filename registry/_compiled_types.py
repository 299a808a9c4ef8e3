"""Compiled executables as signed side artifacts of a variant (issue 27 §2): what a stored set
is (``CompiledSet``), its signed manifest, what a pull did with one (``CompiledUse``), and whose
sets a pull may use (``CompiledPolicy``).

A *compiled set* is what jax's persistent compilation cache wrote when one method of a variant
was compiled on a host (``jaxport compile``): a few files, ``<module>-<sha256 key>-cache``.
Its *manifest* is canonical JSON naming every key field (the variant's digest, the method,
platform, device kind, jax and jaxlib releases, device count, compile options) and every file
(name, sha256, size); the manifest's sha256 is what a Sigstore bundle signs
(``jaxport._signing.sign_digest``, as ``jaxport sign`` signs an archive's). The bytes are native
code: a pull writes them into jax's cache directory only when asked, only when the bundle
verifies with a key the caller trusts, only when every key field matches this host, and only
after every file matches the signed manifest. This module imports no database library and no
jax.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

from jaxport import CorruptArchiveError, InvalidNameError
from jaxport._compiled_host import HostKey
from jaxport._signing import Trusted

__all__ = [
    "COMPILED_KEYS_ENV",
    "MANIFEST_FORMAT",
    "MAX_MANIFEST_BYTES",
    "MAX_SET_FILES",
    "USE_COMPILED_ENV",
    "CompiledFile",
    "CompiledPolicy",
    "CompiledSet",
    "CompiledUse",
    "check_file_name",
    "check_set_files",
    "manifest_bytes",
    "mismatch",
    "parse_manifest",
    "policy_from_env",
    "same_key",
]

#: The manifest's ``format`` field.
MANIFEST_FORMAT = "jaxport-compiled/1"
#: ``1`` (or ``true``): pulls use compiled sets signed by the keys of ``COMPILED_KEYS_ENV``.
USE_COMPILED_ENV = "JAXPORT_USE_COMPILED"
#: The trusted keys' PEM files, separated by ``os.pathsep``.
COMPILED_KEYS_ENV = "JAXPORT_COMPILED_KEYS"
#: A file name jax's cache writes: no separator, no leading dot, at most 255 characters.
_FILE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,254}")
_KEY_FIELDS = ("platform", "device_kind", "jax_version", "jaxlib_version")
#: Most files one set may have, stored (directly or through a server) or read: jax's cache
#: writes one file per compiled computation, a few for most methods, some hundreds for a
#: model whose method compiles many sub-computations.
MAX_SET_FILES = 4096
#: Most bytes of a manifest: ``MAX_SET_FILES`` files of the longest names take 1.6 MiB.
MAX_MANIFEST_BYTES = 4 << 20


@dataclasses.dataclass(frozen=True)
class CompiledFile:
    """One file of a compiled set: its ``name`` in jax's cache directory, ``sha256`` (hex) and
    ``size`` in bytes."""

    name: str
    sha256: str
    size: int


@dataclasses.dataclass(frozen=True)
class CompiledSet:
    """A compiled set of one method of a variant, as stored or as ``Registry.compile`` made it.

    Attributes:
        digest: the variant's archive digest (sha256, hex).
        method: the model's method, or "" for a function archive.
        platform, device_kind, jax_version, jaxlib_version: the host it was compiled on
            (``jaxport._compiled_host.HostKey``).
        nr_devices: the devices the variant runs on.
        options: the compile options that matter (``HostKey.options``).
        files: the files jax's cache wrote.
        manifest_digest: the sha256 of the signed manifest ("" when nothing was stored).
        signer: the fingerprint of the key that signed it ("" when unsigned).
        status: ``"stored"``, ``"already stored"`` (the same signed manifest was there),
            ``"not stored"`` (no key given) or ``"skipped"`` (not compiled: ``reason``).
        reason: why it was skipped or not stored, else None.
    """

    digest: str
    method: str
    platform: str
    device_kind: str
    jax_version: str
    jaxlib_version: str
    nr_devices: int
    options: Mapping[str, str]
    files: tuple[CompiledFile, ...]
    manifest_digest: str = ""
    signer: str = ""
    status: str = "stored"
    reason: str | None = None

    @property
    def size(self) -> int:
        """The files' total size, bytes."""
        return sum(f.size for f in self.files)


@dataclasses.dataclass
class CompiledUse:
    """What a pull with ``use_compiled`` did (``Registry.use_compiled``; ``Model.compiled_use``
    of a pulled model).

    Attributes:
        used: verified files were written into jax's cache directory (``cache_dir``).
        reason: why nothing was used (no trusted key, no set for this host and why, a
            signature or file that does not verify, jax's cache off), else None.
        methods: the methods whose sets were written ("" for a function).
        skipped: method -> why its set was not used (the others may be).
        cache_dir: jax's compilation cache directory written into, else None.
        files: the files written (or already there with the same bytes).
        signer: the fingerprint of the trusted key that signed what was used.
    """

    used: bool
    reason: str | None = None
    methods: tuple[str, ...] = ()
    skipped: dict[str, str] = dataclasses.field(default_factory=dict)
    cache_dir: str | None = None
    files: int = 0
    signer: str | None = None
    _hits_at_start: int = dataclasses.field(default=0, repr=False)

    @property
    def cache_hits(self) -> int:
        """jax's persistent-cache hits in this process since the files were written (all
        compiles of the process count: ``/jax/compilation_cache/cache_hits``); after the
        first call of a method whose set was used, >= 1 when jax really used it."""
        from jaxport.registry._compiled_seed import cache_hits

        return cache_hits() - self._hits_at_start


class CompiledPolicy:
    """Whose compiled sets a pull may write into jax's cache (``Registry(compiled=...)``, or
    ``use_compiled=`` of a pull).

    Args:
        trusted: PEM public keys or CA certificates (paths or bytes), as
            ``SignaturePolicy(keys=...)`` takes them: a set is used only when its bundle
            verifies with one of them.

    Raises:
        SignatureError: a key that is not a PEM public key or certificate; no key at all.
        UnsupportedFeatureError: ``model-signing`` is not installed (``jaxport[signing]``).
    """

    def __init__(self, trusted: Iterable[str | os.PathLike[str] | bytes]) -> None:
        from jaxport import SignatureError
        from jaxport._signing import load_trusted

        if isinstance(trusted, str | bytes | os.PathLike):
            trusted = [trusted]
        # model-signing is imported only when a bundle is verified (not on a cached verdict)
        self.trusted: tuple[Trusted, ...] = tuple(
            load_trusted(k, check_extra=False) for k in trusted
        )
        if not self.trusted:
            raise SignatureError("a CompiledPolicy needs trusted keys")

    def __repr__(self) -> str:
        return f"CompiledPolicy(trusted=[{', '.join(k.short for k in self.trusted)}])"


def policy_from_env(environ: Mapping[str, str] | None = None) -> CompiledPolicy | None:
    """The policy ``$JAXPORT_USE_COMPILED`` (``1``/``true``/``yes``) turns on, with the keys of
    ``$JAXPORT_COMPILED_KEYS``; None when it is off.

    Raises:
        SignatureError: it is on and names no key, or a key that does not load.
    """
    env = os.environ if environ is None else environ
    if env.get(USE_COMPILED_ENV, "").strip().lower() not in ("1", "true", "yes"):
        return None
    keys = [k for k in env.get(COMPILED_KEYS_ENV, "").split(os.pathsep) if k.strip()]
    if not keys:
        from jaxport import SignatureError

        raise SignatureError(
            f"${USE_COMPILED_ENV} is on but ${COMPILED_KEYS_ENV} names no trusted key (PEM "
            f"files, separated by {os.pathsep!r})"
        )
    return CompiledPolicy(keys)


def manifest_bytes(made: CompiledSet) -> bytes:
    """The canonical JSON manifest of a set: every key field and file (sorted keys, no
    spaces, UTF-8); its sha256 is what a signature signs."""
    body = {
        "format": MANIFEST_FORMAT,
        "digest": made.digest,
        "method": made.method,
        **{f: getattr(made, f) for f in _KEY_FIELDS},
        "nr_devices": made.nr_devices,
        "options": dict(made.options),
        "files": [dataclasses.asdict(f) for f in made.files],
    }
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def parse_manifest(data: bytes) -> CompiledSet:
    """The set a manifest describes (a signed manifest is still checked: it is data).

    Raises:
        CorruptArchiveError: not a manifest of this format: over ``MAX_MANIFEST_BYTES``, bad
            or too deeply nested JSON, a missing or mistyped field, a file name that is not a
            plain name, too many files.
    """
    try:
        if len(data) > MAX_MANIFEST_BYTES:
            raise ValueError(f"{len(data):,} bytes (at most {MAX_MANIFEST_BYTES:,})")
        body = json.loads(data)
        if body.get("format") != MANIFEST_FORMAT:
            raise ValueError(f"format {str(body.get('format'))[:40]!r}")
        files = tuple(_file(f) for f in body["files"])
        if not files or len(files) > MAX_SET_FILES or len({f.name for f in files}) != len(files):
            raise ValueError(f"{len(files)} files (1 to {MAX_SET_FILES}, names unique)")
        options = {str(k): str(v) for k, v in dict(body["options"]).items()}
        strings = {f: _text(body[f]) for f in ("digest", "method", *_KEY_FIELDS)}
        nr_devices = body["nr_devices"]
        if type(nr_devices) is not int or nr_devices < 1:
            raise ValueError("nr_devices is not a count")
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as e:
        raise CorruptArchiveError(f"not a compiled set's manifest: {str(e)[:200]}") from None
    return CompiledSet(**strings, nr_devices=nr_devices, options=options, files=files)


def check_set_files(made: CompiledSet) -> CompiledSet:
    """``made`` if it has at most ``MAX_SET_FILES`` files.

    Raises:
        InvalidNameError: more files than that (nothing is uploaded or stored).
    """
    if len(made.files) > MAX_SET_FILES:
        raise InvalidNameError(
            f"a compiled set has at most {MAX_SET_FILES:,} files; the one of "
            f"{made.method or 'the function'} has {len(made.files):,}"
        )
    return made


def same_key(one: CompiledSet, other: CompiledSet) -> bool:
    """Whether two sets have the same key (archive, method, host fields, compile options):
    a store keeps one set per key (``registry/_compiled_store.py``'s ``_key``)."""
    fields = ("digest", "method", *_KEY_FIELDS)
    same = all(getattr(one, f) == getattr(other, f) for f in fields)
    return same and dict(one.options) == dict(other.options)


def check_file_name(name: str) -> str:
    """``name`` if it is a plain file name jax's cache could have written.

    Raises:
        InvalidNameError: a path separator, a leading dot, other characters, over 255.
    """
    if not isinstance(name, str) or not _FILE_NAME.fullmatch(name):
        raise InvalidNameError(f"{str(name)[:80]!r} is not a compiled file's name")
    return name


def mismatch(stored: CompiledSet, host: HostKey) -> str | None:
    """Why a set compiled on ``stored``'s host cannot hit on ``host`` (the first field that
    differs, both values named), else None."""
    words = {"platform": "platform", "device_kind": "device kind", "jaxlib_version": "jaxlib",
             "jax_version": "jax"}  # fmt: skip
    for field, word in words.items():
        ours, theirs = getattr(host, field), getattr(stored, field)
        if ours != theirs:
            return f"{word} {ours} here != {theirs} of the executable"
    if dict(stored.options) != host.options:
        return "compile options (XLA_FLAGS, jax_enable_x64) here differ from the executable's"
    if stored.nr_devices > host.device_count:
        return f"it needs {stored.nr_devices} devices, this host has {host.device_count}"
    return None


def _file(item: Any) -> CompiledFile:
    name = item["name"]
    if not isinstance(name, str) or not _FILE_NAME.fullmatch(name):
        raise ValueError(f"file name {str(name)[:80]!r}")
    sha, size = item["sha256"], item["size"]
    if not (isinstance(sha, str) and re.fullmatch(r"[0-9a-f]{64}", sha)):
        raise ValueError("a file's sha256 is not 64 hex digits")
    if type(size) is not int or size < 0:
        raise ValueError("a file's size is not a byte count")
    return CompiledFile(name, sha, size)


def _text(value: Any) -> str:
    if not isinstance(value, str) or len(value) > 200:
        raise ValueError(f"{str(value)[:40]!r} is not a short string")
    return value
