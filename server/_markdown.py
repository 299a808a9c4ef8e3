"""A version's description (``jaxport.registry.DESCRIPTION_KEY``, Markdown given at push) as
HTML for the pages: CommonMark through markdown-it-py with raw HTML disabled, so the text can
never add markup of its own.

- ``<script>``, ``<img onerror=...>`` and every other tag in the text are shown as text
  (``{"html": False}``: markdown-it escapes them).
- A link's destination is kept only when it is relative (``/names/x``, ``#usage``,
  ``docs/x.md``) or ``http:``/``https:``; any other scheme (``javascript:``, ``data:``,
  ``vbscript:``, ``file:``) leaves the link's text without a link (``validate_link``). It is
  checked after markdown-it decodes entities and backslash escapes, as the browser would read
  it. Links get ``rel="nofollow noopener noreferrer"``.
- Images are not rendered (the pages' Content-Security-Policy loads images from this server
  only): ``![alt](url)`` is the ``!`` then a link.

The pages' Content-Security-Policy (``server/_headers.py``: no script at all) is the second
wall behind these.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

from markdown_it import MarkdownIt
from markdown_it.renderer import RendererHTML
from markdown_it.token import Token
from markdown_it.utils import EnvType, OptionsDict
from markupsafe import Markup

__all__ = ["render_markdown", "summary", "validate_link"]

#: A URL's scheme (RFC 3986: a letter, then letters, digits, ``+``, ``-``, ``.``), before ``:``.
_SCHEME = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.\-]*):")
_ALLOWED_SCHEMES = frozenset({"http", "https"})
_REL = "nofollow noopener noreferrer"


def validate_link(url: str) -> bool:
    """Whether a link may point at ``url``: relative (no scheme), ``http:`` or ``https:``.

    Browsers drop ASCII tabs and newlines inside a URL and leading spaces and control
    characters, so they are dropped before the scheme is read (``java\\tscript:`` is
    ``javascript:``)."""
    cleaned = re.sub(r"[\t\n\r]", "", url).lstrip("".join(map(chr, range(33))))
    match = _SCHEME.match(cleaned)
    return match is None or match.group(1).lower() in _ALLOWED_SCHEMES


def _link_open(
    renderer: RendererHTML, tokens: Sequence[Token], idx: int, options: OptionsDict, env: EnvType
) -> str:
    tokens[idx].attrSet("rel", _REL)
    return renderer.renderToken(tokens, idx, options, env)


@functools.cache
def _parser() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False})
    md.validateLink = validate_link  # type: ignore[method-assign]
    md.disable("image")
    md.add_render_rule("link_open", _link_open)
    return md


def render_markdown(text: str) -> Markup:
    """``text`` (CommonMark) as HTML that holds no markup the text wrote (module doc)."""
    return Markup(_parser().render(text))


def summary(text: str, length: int = 160) -> str:
    """The first paragraph of a description as plain text (Markdown's markup dropped: the words
    of its emphasis, code and links kept), cut at ``length`` characters (search results, the
    compare page)."""
    tokens = _parser().parse(text)
    for i, token in enumerate(tokens[:-1]):
        if token.type == "paragraph_open" and tokens[i + 1].children is not None:
            words = "".join(_plain(child) for child in tokens[i + 1].children or ())
            first = " ".join(words.split())
            return first if len(first) <= length else first[: length - 1].rstrip() + "…"
    return ""


def _plain(token: Token) -> str:
    if token.type in ("text", "code_inline"):
        return token.content
    return " " if token.type in ("softbreak", "hardbreak") else ""
