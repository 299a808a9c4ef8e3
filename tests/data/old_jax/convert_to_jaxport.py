"""Converts the jax 0.4.30 artifacts beside this file into jaxport archives, for
tests/test_audit_old_jax.py: jax 0.11.1 and later refuse to deserialize the ``.jaxexport``
bytes (older than jax's 6-month window), while a jaxport archive is read by jaxport's own
decoder under every jax. Run it once under a jax whose deserialize still accepts them (0.10.2,
the last release CI tested before the refusal) and commit the output:

    python -P tests/data/old_jax/convert_to_jaxport.py

Each ``<name>.jaxport`` holds the Exported of ``<name>.jaxexport`` as jax 0.10.2 read it (its
modules as jax 0.4.30 wrote them); the archive's header records the converting jax (0.10.2) as
its writer, and its metadata ``exported-by`` the jax that exported it.
"""

from __future__ import annotations

from pathlib import Path

import jax

import jaxport

HERE = Path(__file__).resolve().parent

for source in sorted(HERE.glob("*.jaxexport")):
    exp = jax.export.deserialize(bytearray(source.read_bytes()))
    target = source.with_suffix(".jaxport")
    jaxport.save(exp, target, metadata={"exported-by": "jax 0.4.30"})
    print(f"{target.name}: {exp.fun_name}, converted by jax {jax.__version__}")
