"""The adversarial corpus: every known attack on the reader fails with the error it should.

The files in ``corpus/`` are made by ``make_corpus.py`` (its docstring says how); each
reproduces a failure of the reader before issue 9 (``Attack.before``). Their reading time and
memory are measured by ``fuzz_reader.py``-style runs and reported in RELIABILITY.md, not
asserted here: what is asserted is that each raises the expected ``JaxportError`` subclass
with the expected message, from ``loads`` or, for a VJP level (decoded when ``.vjp()`` first
asks, schema/FORMAT.md step 8), from ``.vjp()``, and that ``inspect`` raises nothing else.
"""

from __future__ import annotations

import contextlib

import pytest
from make_corpus import ATTACKS, CORPUS, Attack

import jaxport


def _read(attack: Attack) -> bytes:
    return (CORPUS / f"{attack.name}.jaxport").read_bytes()


def _read_every_level(data: bytes) -> None:
    """``loads``, then each ``.vjp()``. Trusted: the corpus's module is a stand-in (MLIR
    bytecode's magic, then text) that only the sandbox refuses, and every attack is on the
    header, read level by level."""
    exported = jaxport.loads(data, trusted=True)
    while exported.has_vjp():
        exported = exported.vjp()


@pytest.mark.parametrize("attack", ATTACKS, ids=lambda a: a.name)
def test_loads_raises_the_expected_error(attack: Attack) -> None:
    with pytest.raises(jaxport.JaxportError) as e:
        _read_every_level(_read(attack))
    assert type(e.value).__name__ == attack.error
    assert attack.fragment in str(e.value)


@pytest.mark.parametrize("attack", ATTACKS, ids=lambda a: a.name)
def test_inspect_raises_only_jaxport_errors(attack: Attack) -> None:
    with contextlib.suppress(jaxport.JaxportError):
        jaxport.inspect(_read(attack))


@pytest.mark.parametrize("attack", ATTACKS, ids=lambda a: a.name)
def test_corpus_files_are_what_make_corpus_writes(attack: Attack) -> None:
    assert _read(attack) == attack.make(), "run python tests/reliability/make_corpus.py"


def test_every_file_is_an_attack() -> None:
    assert sorted(p.stem for p in CORPUS.glob("*.jaxport")) == sorted(a.name for a in ATTACKS)
