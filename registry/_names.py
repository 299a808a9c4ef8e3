"""What the registry accepts from a caller: names, references, versions, digests, metadata and
platform names, each checked at the API boundary (``InvalidNameError`` otherwise).

References::

    NAME              the newest version of NAME
    NAME:N            version N (ASCII digits, 1 .. 2**31 - 1)
    NAME@ALIAS        the version ALIAS points at
    sha256:HEX        the variant whose digest starts with HEX (at least 6 lowercase hex digits)
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

from jaxport import InvalidNameError
from jaxport._grammar import MAX_NAME_LENGTH, name_problem

__all__ = [
    "DESCRIPTION_KEY",
    "DIGEST_PREFIX",
    "KNOWN_PLATFORMS",
    "MAX_DESCRIPTION_BYTES",
    "MAX_METADATA_BYTES",
    "MAX_NAME_LENGTH",
    "MAX_VERSION",
    "MIN_DIGEST_PREFIX",
    "Reference",
    "check_count",
    "check_digest",
    "check_metadata",
    "check_name",
    "check_names",
    "check_seconds",
    "check_text",
    "check_timeout",
    "check_version",
    "normalize_platform",
    "parse_reference",
]

#: The platforms jax exports for (``Exported.platforms``); the same as
#: ``jaxport.export._compat.KNOWN_PLATFORMS``, kept here so that checking a name imports no jax.
KNOWN_PLATFORMS = ("cpu", "cuda", "rocm", "tpu")
#: The largest version number (the database column is a 32-bit integer).
MAX_VERSION = 2**31 - 1
#: How a digest reference starts.
DIGEST_PREFIX = "sha256:"
#: The shortest digest prefix a reference may use, in hex digits.
MIN_DIGEST_PREFIX = 6
#: The largest metadata of one push (keys and values, UTF-8), in bytes.
MAX_METADATA_BYTES = 1 << 20
#: The metadata key of a version's description (its model card): Markdown, which the server's
#: pages render with HTML disabled (``server/_markdown.py``); ``jaxport push --description``.
DESCRIPTION_KEY = "description"
#: The largest description, in bytes (UTF-8).
MAX_DESCRIPTION_BYTES = 64 << 10
_HEX = re.compile(r"[0-9a-f]+")
_DIGITS = re.compile(r"[0-9]+")


@dataclasses.dataclass(frozen=True)
class Reference:
    """A parsed reference: a name with a version or an alias, or a digest prefix."""

    name: str | None
    version: int | None = None
    alias: str | None = None
    digest_prefix: str | None = None

    def __str__(self) -> str:
        if self.digest_prefix is not None:
            return f"{DIGEST_PREFIX}{self.digest_prefix}"
        if self.alias is not None:
            return f"{self.name}@{self.alias}"
        return f"{self.name}:{self.version}" if self.version is not None else str(self.name)


def check_name(name: object, what: str = "name") -> str:
    """``name`` if it is a valid registry name or alias.

    Rules (``jaxport._grammar.NAME``, the one grammar of names): 1 to 200 characters of ASCII
    letters, digits, ``.``, ``_`` and ``-``, starting with a letter or digit (so no path
    separators, control characters, ``@`` or ``:``); a non-ASCII look-alike of an ASCII name
    (NFKC) is refused as one.

    Raises:
        InvalidNameError: the name breaks a rule; the message says which.
    """
    problem = name_problem(name, what)
    if problem is not None:
        raise InvalidNameError(problem)
    return cast(str, name)  # name_problem found a str


def check_version(version: object) -> int:
    """``version`` if it is an int (not a bool) in 1 .. ``MAX_VERSION``.

    Raises:
        InvalidNameError: any other value.
    """
    if isinstance(version, bool) or not isinstance(version, int):
        raise InvalidNameError(f"a version must be an int, got {version!r}")
    if not 1 <= version <= MAX_VERSION:
        raise InvalidNameError(f"version {version} is outside 1 .. {MAX_VERSION}")
    return version


def check_count(n: object, what: str, high: int = MAX_VERSION) -> int:
    """``n`` if it is an int (not a bool) in 1 .. ``high`` (a device count, a page size, ...).

    Raises:
        InvalidNameError: any other value.
    """
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= high:
        raise InvalidNameError(f"{what} must be an int in 1 .. {high}, got {n!r:.40}")
    return n


def check_seconds(seconds: object, what: str) -> float:
    """``seconds`` if it is a finite, non-negative number of seconds.

    Raises:
        InvalidNameError: anything else (a string, NaN, infinity, a negative number).
    """
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise InvalidNameError(f"{what} must be a number of seconds, got {seconds!r:.40}")
    if not math.isfinite(seconds) or seconds < 0:
        raise InvalidNameError(f"{what} must be finite and >= 0 seconds, got {seconds!r}")
    return float(seconds)


#: The longest time limit a worker job may be given, in seconds (a day; ``select`` and
#: ``poll`` refuse a wait beyond about 24 days).
MAX_TIMEOUT = 86400.0


def check_timeout(seconds: object, what: str) -> float:
    """``seconds`` if it is a time limit: a number > 0 and at most ``MAX_TIMEOUT``.

    Raises:
        InvalidNameError: anything else (NaN, infinity, 0 or less, more than a day).
    """
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise InvalidNameError(f"{what} must be a number of seconds, got {seconds!r:.40}")
    if not 0 < seconds <= MAX_TIMEOUT:  # NaN fails this too
        raise InvalidNameError(
            f"{what} must be > 0 and at most {MAX_TIMEOUT:.0f} seconds, got {seconds!r}"
        )
    return float(seconds)


def check_text(text: object, what: str) -> str:
    """``text`` if it is a valid UTF-8 string of at most 1000 characters (a filter value).

    Raises:
        InvalidNameError: anything else.
    """
    if not isinstance(text, str) or len(text) > 1000:
        raise InvalidNameError(f"{what} must be a string of at most 1000 characters")
    _utf8_length(text, what)
    return text


def check_digest(digest: object) -> str:
    """``digest`` if it is a sha256 digest: 64 lowercase hex digits.

    Raises:
        InvalidNameError: anything else.
    """
    if not isinstance(digest, str) or len(digest) != 64 or not _HEX.fullmatch(digest):
        raise InvalidNameError(f"not a sha256 digest (64 lowercase hex digits): {digest!r:.80}")
    return digest


def parse_reference(reference: object) -> Reference:
    """``"mlp"``, ``"mlp:3"``, ``"mlp@prod"`` or ``"sha256:1a2b3c"`` -> a ``Reference``.

    Raises:
        InvalidNameError: a malformed reference.
    """
    if not isinstance(reference, str):
        raise InvalidNameError(f"a reference must be a string, got {reference!r}")
    if reference.startswith(DIGEST_PREFIX):
        prefix = reference.removeprefix(DIGEST_PREFIX)
        if not MIN_DIGEST_PREFIX <= len(prefix) <= 64 or not _HEX.fullmatch(prefix):
            raise InvalidNameError(
                f"bad digest reference {reference!r:.90}: expected sha256: and "
                f"{MIN_DIGEST_PREFIX} to 64 lowercase hex digits"
            )
        return Reference(None, digest_prefix=prefix)
    if "@" in reference:
        name, _, alias = reference.partition("@")
        return Reference(check_name(name), alias=check_name(alias, "alias"))
    if ":" in reference:
        name, _, text = reference.partition(":")
        if not _DIGITS.fullmatch(text) or len(text) > 10 or not 1 <= int(text) <= MAX_VERSION:
            raise InvalidNameError(
                f"bad version in reference {reference!r:.90}: expected NAME:N with N in "
                f"1 .. {MAX_VERSION} (ASCII digits)"
            )
        return Reference(check_name(name), version=int(text))
    return Reference(check_name(reference))


def check_metadata(metadata: Mapping[str, str] | None) -> dict[str, str]:
    """``metadata`` as a plain dict if every key and value is a valid UTF-8 string.

    Keys: 1 to 200 characters; the whole mapping at most ``MAX_METADATA_BYTES`` (UTF-8), the
    value of ``DESCRIPTION_KEY`` at most ``MAX_DESCRIPTION_BYTES``.

    Raises:
        InvalidNameError: a non-string, empty or over-long key, a non-string value, a string
            that is not valid UTF-8 (a lone surrogate), too much metadata, or too long a
            description.
    """
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping):
        raise InvalidNameError(f"metadata must be a mapping of strings, got {metadata!r:.80}")
    total = 0
    for key, value in metadata.items():
        if not isinstance(key, str) or not 1 <= len(key) <= MAX_NAME_LENGTH:
            raise InvalidNameError(f"metadata keys are 1 to 200 characters, got {key!r:.80}")
        if not isinstance(value, str):
            raise InvalidNameError(f"metadata value of {key!r} is not a string: {value!r:.80}")
        size = _utf8_length(value, f"metadata {key!r}")
        if key == DESCRIPTION_KEY and size > MAX_DESCRIPTION_BYTES:
            raise InvalidNameError(
                f"the description is {size} bytes, the limit is {MAX_DESCRIPTION_BYTES}"
            )
        total += _utf8_length(key, "metadata key") + size
    if total > MAX_METADATA_BYTES:
        raise InvalidNameError(f"metadata is {total} bytes, the limit is {MAX_METADATA_BYTES}")
    return dict(metadata)


def _utf8_length(text: str, what: str) -> int:
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidNameError(f"{what} is not valid UTF-8 (a lone surrogate)") from None


def check_names(names: Iterable[object], what: str) -> list[str]:
    """Each of ``names`` checked with ``check_name`` (a single string is refused)."""
    if isinstance(names, str):
        raise InvalidNameError(f"{what}es must be a list of strings, got the string {names!r}")
    return [check_name(n, what) for n in names]


def normalize_platform(platform: Any) -> str:
    """A platform name as exports spell it: lower case; ``gpu`` is the local GPU kind.

    Source: jax's ``xla_bridge.canonicalize_platform`` (``gpu`` -> ``cuda`` or ``rocm``:
    ``jaxport.export._internal.local_gpu_platform``).

    Raises:
        InvalidNameError: not a platform jax exports for, or ``gpu`` on a machine without one.
    """
    if not isinstance(platform, str):
        raise InvalidNameError(f"a platform must be a string, got {platform!r}")
    name = platform.strip().lower()
    if name == "gpu":
        from jaxport.export._internal import local_gpu_platform

        try:
            return local_gpu_platform()
        except RuntimeError:
            raise InvalidNameError("no GPU here to stand for 'gpu': name cuda or rocm") from None
    if name not in KNOWN_PLATFORMS:
        raise InvalidNameError(
            f"unknown platform {platform!r:.40}: use one of {', '.join(KNOWN_PLATFORMS)} or gpu"
        )
    return name


def check_allowlist(allow_custom_calls: Sequence[str]) -> tuple[str, ...]:
    """A push's or pull's custom-call allowlist, checked: a collection of targets, never one
    string.

    Raises:
        TypeError: one string (as ``jaxport.loads`` says it).
    """
    if isinstance(allow_custom_calls, str):
        raise TypeError(
            "allow_custom_calls must be a collection of target names, not one string: "
            f"write allow_custom_calls=({allow_custom_calls!r},)"
        )
    return tuple(allow_custom_calls)
