"""The switch under which unregistered custom pytree nodes are read as stand-ins.

The ``jaxport`` command and the audit and ``verify --deep`` workers are whole processes that
never import the user's classes; they open ``standins_allowed()`` around their work, and the
reader (``jaxport.export._standin``) then reads an unregistered node as a ``StandIn`` in every
thread of the process. Library callers never open it. No jax here: the command's light
subcommands import this without jax.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

__all__ = ["standins_allowed", "standins_on"]

#: How many ``standins_allowed()`` blocks are open, in any thread.
_OPEN = [0]
_LOCK = threading.Lock()


def standins_on() -> bool:
    """Whether an unregistered custom node is read as a ``StandIn`` here."""
    return _OPEN[0] > 0


@contextlib.contextmanager
def standins_allowed() -> Iterator[None]:
    """While it is open, unregistered custom nodes are read as ``StandIn``s in every thread of
    the process (for the CLI and the workers, not for library callers)."""
    with _LOCK:
        _OPEN[0] += 1
    try:
        yield
    finally:
        with _LOCK:
            _OPEN[0] -= 1
