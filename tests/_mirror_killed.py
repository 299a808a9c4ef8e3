"""``jaxport mirror ARGS`` that kills itself with SIGKILL just before the ``KILL_AT``-th call
of ``KILL_ON``: ``replace`` (``os.replace``: a file put in place, a blob or ``index.json``) or
``commit`` (a database transaction committed); with ``KILL_AT=0`` it runs whole and prints
how many there were (``COUNTS replaces commits``). For ``test_oci_attacks.py``."""

from __future__ import annotations

import os
import signal
import sys

from sqlalchemy import event
from sqlalchemy.engine import Engine

KILL_ON, KILL_AT = os.environ.get("KILL_ON", "replace"), int(os.environ.get("KILL_AT", "0"))
COUNT = {"replace": 0, "commit": 0}


def _tick(kind: str) -> None:
    COUNT[kind] += 1
    if kind == KILL_ON and COUNT[kind] == KILL_AT:
        os.kill(os.getpid(), signal.SIGKILL)


_replace = os.replace


def _counted_replace(*args, **kwargs):
    _tick("replace")
    return _replace(*args, **kwargs)


os.replace = _counted_replace
event.listen(Engine, "commit", lambda connection: _tick("commit"))

from jaxport._cli.main import main  # noqa: E402 (after the hooks)

try:
    main(["mirror", *sys.argv[1:]], standalone_mode=False)
finally:
    print("COUNTS", COUNT["replace"], COUNT["commit"])
