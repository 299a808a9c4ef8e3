"""Secrets of a blob store's location and storage options, kept out of everything shown.

An fsspec blob store is given credentials two ways: in its URL (``ftp://user:PASSWORD@host``;
s3fs takes no credentials there, so ``s3://KEY:SECRET@bucket`` reaches botocore as a bucket
name, and its error messages repeat it) and in storage options (``key``, ``secret``, ``token``,
``client_kwargs={"aws_secret_access_key": ...}``). ``secret_values`` collects every such string,
``masked`` replaces them (and any URL password, ``safe_url``) with ``***`` in a text, and
``masked_options`` shows the options with their secret values masked. Imports nothing heavy.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from urllib.parse import unquote

from jaxport.registry._config import safe_url

__all__ = ["masked", "masked_options", "secret_values"]

#: Option names whose values are secrets: s3fs's ``key``, ``secret``, ``token``, botocore's
#: ``aws_access_key_id`` / ``aws_secret_access_key`` / ``aws_session_token``, passwords,
#: credentials, Azure's ``account_key`` / ``sas_token`` / ``connection_string``, ``sig``,
#: ``Authorization`` headers; ``key``, ``pwd``, ``sig`` and ``auth`` as words of the name only
#: (not ``signature_version``, ``max_keys``).
_SECRET_NAME = re.compile(
    r"secret|token|passw|credential|connection_string"
    r"|(?:^|[^a-z])(?:key|pwd|sig|auth[a-z]*)(?:$|[^a-z])",
    re.IGNORECASE,
)
#: The password of a URL's userinfo, wherever a URL sits (also after a chain's ``::``).
_PASSWORD = re.compile(r"[\w+.\-]+://[^:/@]*:([^@]*)@")

_MASK = "***"


def secret_values(url: str, options: Mapping[str, object]) -> frozenset[str]:
    """The strings of ``url`` and ``options`` that must not be shown: URL passwords (as written
    and percent-decoded), and every string value of an option named like a secret, in nested
    mappings too (``client_kwargs``, ``config_kwargs``). Empty strings are left out."""
    found = _url_passwords(url) | _option_secrets(options, depth=4)
    for value in options.values():
        if isinstance(value, str):
            found |= _url_passwords(value)  # endpoint_url="https://user:password@host"
    return frozenset(s for s in found if s)


def _url_passwords(text: str) -> set[str]:
    """The passwords of the URLs in ``text``, as written and percent-decoded."""
    found = {m.group(1) for m in _PASSWORD.finditer(text)}
    return found | {unquote(s) for s in found}


def _option_secrets(options: Mapping[str, object], depth: int) -> set[str]:
    found: set[str] = set()
    for name, value in options.items():
        if isinstance(value, str) and _SECRET_NAME.search(str(name)):
            found.add(value)
        elif isinstance(value, Mapping) and depth > 0:
            found |= _option_secrets(value, depth - 1)
    return found


def masked(text: str, secrets: frozenset[str]) -> str:
    """``text`` with each of ``secrets`` (longest first) and any URL password shown as ``***``."""
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, _MASK)
    return safe_url(text)


def masked_options(options: Mapping[str, object], depth: int = 4) -> dict[str, object]:
    """``options`` with the value of every option named like a secret shown as ``***`` (nested
    mappings too), and URLs in string values shown by ``safe_url``: for ``repr``."""
    shown: dict[str, object] = {}
    for name, value in options.items():
        if isinstance(value, Mapping) and depth > 0:
            shown[name] = masked_options(value, depth - 1)
        elif _SECRET_NAME.search(str(name)):
            shown[name] = _MASK
        else:
            shown[name] = safe_url(value) if isinstance(value, str) else value
    return shown
