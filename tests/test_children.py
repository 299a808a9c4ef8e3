"""Every process jaxport starts dies with its parent and has a deadline (``jaxport._children``).

Each spawn site is driven in a parent process with a stand-in interpreter: a shell script that
records its process id and sleeps. The parent is killed with SIGKILL while it waits for the
child (mid-sandbox, mid-conversion, mid-rescue, mid-audit, mid-install); the child must be gone
soon after (the kernel's ``PR_SET_PDEATHSIG``), never left running under PID 1.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jaxport import _children

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG")

#: What each parent runs with ``FAKE`` (the stand-in interpreter) and ``WORK`` (a directory).
SITES = {
    "sandbox": "from jaxport.export._sandbox import Sandbox\n"
    "Sandbox(python=FAKE).parse(b'module', timeout=600)",
    "converter": "import sys\nsys.executable = FAKE\n"
    "from jaxport.export import convert_native\nconvert_native(b'not an archive', timeout=600)",
    "rescue": "import pathlib, jaxport\npathlib.Path(WORK, 'in').write_bytes(b'native')\n"
    "jaxport.rescue(pathlib.Path(WORK, 'in'), pathlib.Path(WORK, 'out'), python=FAKE)",
    "audit": "from jaxport.audit import AuditJob, run_audits\n"
    "run_audits([AuditJob(b'archive', None)], python=FAKE)",
    "probe": "from jaxport.audit._probe import _versions_of\n_versions_of(FAKE, ('jax',))",
    "install": "from jaxport.audit._envs import _run\n_run((FAKE, 'install'))",
}


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, killed and not yet reaped, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def _wait_for(predicate, seconds: float) -> bool:
    for _ in range(int(seconds / 0.05)):
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


@pytest.mark.parametrize("site", sorted(SITES))
def test_child_dies_with_its_parent(tmp_path, site):
    pids = tmp_path / "pids"
    fake = tmp_path / "python"
    fake.write_text(f"#!/bin/sh\necho $$ >> {pids}\nexec sleep 600\n")
    fake.chmod(0o755)
    script = f"FAKE = {str(fake)!r}\nWORK = {str(tmp_path)!r}\n" + SITES[site]
    parent = subprocess.Popen([sys.executable, "-P", "-c", script], cwd=tmp_path)
    try:
        assert _wait_for(lambda: pids.exists() and pids.read_text().strip(), 60), "no child"
        child = int(pids.read_text().split()[0])
        assert _alive(child)
    finally:
        parent.kill()
        parent.wait()
    gone = _wait_for(lambda: not _alive(child), 10)
    if not gone:
        os.kill(child, signal.SIGKILL)
    assert gone, f"the {site} child outlived its parent"


def test_a_one_shot_child_has_its_own_deadline():
    # nobody waits for it: its own alarm ends it DEADLINE_GRACE seconds after its deadline
    process = _children.spawn(["sleep", "60"], deadline=0.1)
    try:
        process.wait(timeout=30)
    finally:
        process.kill()
        process.wait()
    assert process.returncode == -signal.SIGALRM


def test_run_kills_the_child_at_its_time_limit(tmp_path):
    pids = tmp_path / "pid"
    with pytest.raises(subprocess.TimeoutExpired):
        _children.run(["sh", "-c", f"echo $$ > {pids}; exec sleep 60"], timeout=1)
    assert not _alive(int(pids.read_text()))


def test_a_child_started_by_a_thread_outlives_the_thread(tmp_path):
    # PR_SET_PDEATHSIG fires when the forking *thread* exits: children are forked by one
    # long-lived thread, so a worker started from a short-lived thread keeps running
    import threading

    started = []
    thread = threading.Thread(target=lambda: started.append(_children.spawn(["sleep", "60"])))
    thread.start()
    thread.join()
    process = started[0]
    try:
        time.sleep(0.5)
        assert process.poll() is None
    finally:
        process.kill()
        process.wait()
