"""The one ASCII grammar of what users name: registry names and aliases, and model methods.

    NAME    [A-Za-z0-9][A-Za-z0-9._-]*   1 to 200 characters  (registry names and aliases)
    METHOD  [A-Za-z][A-Za-z0-9_]*        1 to 200 characters  (a model's methods: a Python
                                                                identifier, no leading "_")

ASCII only: a name is compared, stored and shown byte for byte, so two names that look alike
are never two spellings of one. A string whose NFKC normalization (``unicodedata``, Unicode
Standard Annex #15) is ASCII and differs from it, such as fullwidth ``params`` (U+FF50 ...), is
refused as a look-alike of that ASCII name: Python itself NFKC-normalizes identifiers in source
code (PEP 3131), so a fullwidth ``model.params`` would name ``model.params``. Each caller raises its
own error with the message given here (``InvalidNameError`` in the registry,
``UnsupportedFeatureError`` when a model is made, ``CorruptArchiveError`` when one is read).
Imports nothing of jaxport, so ``export`` and ``registry`` both use it.
"""

from __future__ import annotations

import re
import unicodedata

__all__ = ["MAX_NAME_LENGTH", "METHOD", "NAME", "method_problem", "name_problem"]

#: The longest name, alias or method name, in characters.
MAX_NAME_LENGTH = 200
#: Registry names and aliases.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._\-]*")
#: Model method names.
METHOD = re.compile(r"[A-Za-z][A-Za-z0-9_]*")

_NAME_CHARS = "ASCII letters, digits, '.', '_' and '-', starting with a letter or digit"
_METHOD_CHARS = "ASCII letters, digits and '_', starting with a letter"


def name_problem(name: object, what: str = "name") -> str | None:
    """Why ``name`` is not a valid registry name or alias (``what`` says which), or None."""
    return _problem(name, what, NAME, _NAME_CHARS)


def method_problem(name: object) -> str | None:
    """Why ``name`` is not a valid model method name, or None."""
    return _problem(name, "method name", METHOD, _METHOD_CHARS)


def _problem(text: object, what: str, grammar: re.Pattern[str], chars: str) -> str | None:
    if not isinstance(text, str) or not text:
        return f"{what} must be a non-empty string, got {text!r:.80}"
    if len(text) > MAX_NAME_LENGTH:
        return f"{what} is {len(text)} characters, the limit is {MAX_NAME_LENGTH}"
    if not text.isascii():
        folded = unicodedata.normalize("NFKC", text)
        if folded != text and folded.isascii():
            return (
                f"{what} {text!r} is a look-alike of the ASCII {folded!r} (compatibility "
                f"characters such as fullwidth letters): only {chars} are allowed"
            )
        return f"{what} {text!r:.80} is not ASCII: only {chars} are allowed"
    if not grammar.fullmatch(text):
        return f"{what} {text!r} is not allowed: use {chars}"
    return None
