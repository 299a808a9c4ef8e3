"""Symbolic dimension expressions and constraints, bounded before jax builds them.

jax parses ``"2*b + mod(a, 4)"`` with Python's ``tokenize`` and a recursive-descent parser, and
builds the expression as it goes (https://docs.jax.dev/en/latest/export/shape_poly.html).
Three things make that cost grow much faster than the text (all measured with jax 0.10.2):

- ``max``/``min`` ask jax's decision procedure which operand is larger, which is exponential
  in the constraints and in the ``max``/``min`` it meets: a 116-character expression took 32 s;
- an equality constraint ``a == b0 + ... + b7`` is a rewriting rule, and ``a^8`` then expands
  to 6,435 terms (1.1 s);
- the parser recurses, so 256 nested ``max(`` raise ``RecursionError``.

So both reader and writer first check the text against the grammar jax prints: identifiers,
integer literals, ``+ - * ^ , ( )``, spaces, the functions ``mod``, ``floordiv``, ``max`` and
``min``, and for a constraint one of ``== >= <=``, within the limits of ``_limits``; among
them a bound on the terms the expression can expand to under the equality rules. The reader
then parses with jax's own parser, except that ``max``/``min`` are built as written, without
asking which operand is larger: what jax printed was already simplified, so the result is the
same expression, and a hostile one costs no decision procedure.
"""

from __future__ import annotations

import dataclasses
import re
import tokenize
from collections.abc import Sequence
from typing import Any

from jaxport.export import _limits
from jaxport.export._jax import core, shape_poly

__all__ = [
    "constraint_problem",
    "expansion_of",
    "expression_problem",
    "make_scope",
    "parse_dimension",
]

_TOKEN = re.compile(r" *(?:(?P<name>[^\W\d]\w*)|(?P<int>\d+)|(?P<op>[-+*^(),]))")
_FUNCTIONS = frozenset({"mod", "floordiv", "max", "min"})
_COMPARATORS = ("==", ">=", "<=")
_MAX_INT_DIGITS = 19  # an int64


class _Invalid(Exception):
    """A problem found in an expression's text (internal: returned as a message)."""


def expression_problem(text: str, expansion: int = 1) -> str | None:
    """What makes ``text`` unacceptable as one dimension expression, or None.

    Args:
        text: e.g. ``"2*b + 1"``.
        expansion: the most terms one factor can be rewritten to by the scope's equality
            constraints (``expansion_of``).
    """
    if len(text) > _limits.MAX_EXPR_CHARS:
        return f"longer than {_limits.MAX_EXPR_CHARS} characters"
    try:
        _Analysis(text, expansion).whole()
    except _Invalid as e:
        return str(e)
    return None


def constraint_problem(text: str, expansion: int = 1) -> str | None:
    """What makes ``text`` unacceptable as a symbolic constraint (``"a >= b + 1"``), or None."""
    if len(text) > _limits.MAX_EXPR_CHARS:
        return f"longer than {_limits.MAX_EXPR_CHARS} characters"
    found = [c for c in _COMPARATORS if c in text]
    if len(found) != 1 or text.count(found[0]) != 1:
        return "not of the form 'e1 == e2', 'e1 >= e2' or 'e1 <= e2'"
    try:
        _Analysis(text.replace(found[0], ",", 1), expansion).whole(sides=2)
    except _Invalid as e:
        return str(e)
    return None


def expansion_of(constraints: Sequence[str]) -> int:
    """The most terms one factor may be rewritten to by these constraints' equalities.

    Bounded by the atoms of the right-hand side of each ``==`` (jax rewrites the left side,
    a single term, into the right side as expressions are built).
    """
    most = 1
    for c in constraints:
        if "==" in c:
            right = c.split("==", 1)[1]
            atoms = sum(1 for m in _TOKEN.finditer(right) if m.group("op") is None)
            most = max(most, atoms)
    return most


@dataclasses.dataclass
class _Analysis:
    """A recursive-descent check of jax's expression grammar, with its costs.

    ``work`` bounds the terms jax builds: an expression's terms are at most the sum, over its
    products, of ``expansion ** degree``, and each function argument is built too.
    """

    text: str
    expansion: int
    tokens: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    position: int = 0
    atoms: int = 0
    work: int = 0

    def whole(self, sides: int = 1) -> None:
        self.tokens = self._tokenize()
        for side in range(sides):
            if side:
                self._expect(",")
            self._expr(0)
        if self.position != len(self.tokens):
            raise _Invalid(f"unexpected {self.tokens[self.position][1]!r}")
        if self.atoms > _limits.MAX_EXPR_ATOMS:
            raise _Invalid(f"more than {_limits.MAX_EXPR_ATOMS} symbols and integers")

    def _tokenize(self) -> list[tuple[str, str]]:
        tokens, position, end = [], 0, len(self.text.rstrip(" "))
        while position < end:
            match = _TOKEN.match(self.text, position)
            if match is None:
                rest = self.text[position:].lstrip(" ")
                raise _Invalid(f"unexpected character {rest[:1]!r}")
            position = match.end()
            kind = match.lastgroup or "op"
            tokens.append((kind, match.group(kind)))
        if not tokens:
            raise _Invalid("empty")
        return tokens

    def _peek(self) -> str:
        return self.tokens[self.position][1] if self.position < len(self.tokens) else ""

    def _next(self) -> tuple[str, str]:
        if self.position >= len(self.tokens):
            raise _Invalid("unexpected end")
        token = self.tokens[self.position]
        self.position += 1
        return token

    def _expect(self, op: str) -> None:
        if self._next()[1] != op:
            raise _Invalid(f"expected {op!r} at token {self.position}")

    def _expr(self, depth: int) -> None:
        if depth > _limits.MAX_EXPR_NESTING:
            raise _Invalid(f"parentheses nested deeper than {_limits.MAX_EXPR_NESTING}")
        if self._peek() in ("+", "-"):
            self.position += 1
        size = self.expansion ** self._term(depth)
        while self._peek() in ("+", "-"):
            self.position += 1
            size += self.expansion ** self._term(depth)
        self.work += size
        if self.work > _limits.MAX_EXPR_EXPANSION:
            raise _Invalid(
                f"may expand to more than {_limits.MAX_EXPR_EXPANSION} terms under the "
                "equality constraints"
            )

    def _term(self, depth: int) -> int:
        degree = self._power(depth)
        while self._peek() == "*":
            self.position += 1
            degree += self._power(depth)
        return degree

    def _power(self, depth: int) -> int:
        degree = self._factor(depth)
        if self._peek() != "^":
            return degree
        self.position += 1
        kind, value = self._next()
        if kind != "int" or int(value) > _limits.MAX_EXPR_EXPONENT:
            raise _Invalid(f"an exponent that is not an integer up to {_limits.MAX_EXPR_EXPONENT}")
        return degree * int(value)

    def _factor(self, depth: int) -> int:
        kind, value = self._next()
        if kind == "op" and value == "-":
            kind, value = self._next()
            if kind != "int":
                raise _Invalid("'-' before something other than an integer")
        if kind == "int":
            self.atoms += 1
            if len(value) > _MAX_INT_DIGITS:
                raise _Invalid(f"an integer of more than {_MAX_INT_DIGITS} digits")
            return 0
        if kind != "name":
            raise _Invalid(f"unexpected {value!r}")
        if value in _FUNCTIONS:
            self._expect("(")
            self._expr(depth + 1)
            self._expect(",")
            start = self.position
            self._expr(depth + 1)
            divisor = [t for t in self.tokens[start : self.position] if t[1] not in ("+", "-")]
            zero = len(divisor) == 1 and divisor[0][0] == "int" and int(divisor[0][1]) == 0
            if value in ("mod", "floordiv") and zero:
                raise _Invalid(f"{value} by zero")
            self._expect(")")
        else:
            self.atoms += 1
        return 1


class _Parser(shape_poly._Parser):
    """jax's parser, building ``max``/``min`` as written (no decision procedure)."""

    def factor_binary_op(self, op: str, tok: Any) -> tuple[Any, Any]:
        if op not in (shape_poly._DimFactor.MAX, shape_poly._DimFactor.MIN):
            return super().factor_binary_op(op, tok)
        tok = self.consume_token(tok, tokenize.LPAR)
        e1, tok = self.expr(tok)
        tok = self.consume_token(tok, tokenize.COMMA)
        e2, tok = self.expr(tok)
        tok = self.consume_token(tok, tokenize.RPAR)
        if core.is_constant_dim(e1) and core.is_constant_dim(e2):
            pick = max if op == shape_poly._DimFactor.MAX else min
            return pick(int(e1), int(e2)), tok
        return shape_poly._DimExpr._from_operation(op, e1, e2, scope=self.scope), tok


def parse_dimension(text: str, scope: Any) -> Any:
    """The dimension (a jax ``DimExpr``, or an int) that ``text`` denotes in ``scope``.

    ``text`` must have passed ``expression_problem``.

    Raises:
        ValueError, and the other errors of jax's parser on text that jax rejects.
    """
    (dim,) = _Parser(text, None, repr(text), scope).parse()
    return dim


def make_scope(constraints: Sequence[str]) -> Any:
    """A fresh ``jax.export.SymbolicScope`` with these constraints, parsed as by jax.

    Follows ``SymbolicScope._parse_and_process_explicit_constraint`` (identical from jax 0.7.0
    to 0.10.2) with the parser above. Each constraint must have passed ``constraint_problem``.

    Raises:
        ValueError, NotImplementedError: constraints jax rejects (unsatisfiable, or two
            equalities with the same left side).
    """
    scope = shape_poly.SymbolicScope(())
    scope._initialized = False
    for text in constraints:
        comparator = next(c for c in _COMPARATORS if c in text)
        left, right = text.split(comparator)
        e1, e2 = parse_dimension(left, scope), parse_dimension(right, scope)
        if comparator == "<=":
            e1, e2 = e2, e1
        cmp = shape_poly.Comparator.EQ if comparator == "==" else shape_poly.Comparator.GEQ
        constraint = shape_poly._SymbolicConstraint(
            debug_str=text, cmp=cmp, e1=e1, e2=e2, diff=e1 - e2
        )
        scope._process_explicit_constraint(constraint)
        scope._bounds_cache.clear()
    scope._initialized = True
    return scope
