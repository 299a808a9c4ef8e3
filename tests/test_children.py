"""Every process jaxport starts dies with its parent and has a deadline (``jaxport._children``).

Each spawn site is driven in a parent process with a stand-in interpreter: a shell script that
records its process id and sleeps. The parent is killed with SIGKILL while it waits for the
child (mid-sandbox, mid-conversion, mid-rescue, mid-audit, mid-install); the child must be gone
soon after (the kernel's ``PR_SET_PDEATHSIG``), never left running under PID 1.
"""

from __future__ import annotations

import json
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
    "converter": "import sys, jaxport._children\nsys.executable = FAKE\n"
    "from jaxport.export import convert_native\nconvert_native(b'not an archive', timeout=600)",
    "rescue": "import pathlib, jaxport\npathlib.Path(WORK, 'in').write_bytes(b'native')\n"
    "jaxport.rescue(pathlib.Path(WORK, 'in'), pathlib.Path(WORK, 'out'), python=FAKE)",
    "audit": "from jaxport.audit import AuditJob, run_audits\n"
    "run_audits([AuditJob(b'archive', None)], python=FAKE)",
    "run": "import sys, pathlib, jaxport._children\nsys.executable = FAKE\n"
    "from jaxport._cli.runner import call_in_child\n"
    "call_in_child(pathlib.Path(WORK, 'a.jaxport'), None, pathlib.Path(WORK, 'in.npz'))",
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


def _looping_archive(path: Path) -> None:
    """A function that loops forever on a positive input (as a mutated module did, ~469 M
    iterations): nothing in the caller can interrupt it."""
    import jax
    import jax.numpy as jnp

    import jaxport

    def loop(x):
        def step(c):
            return c[0] + jnp.where(c[1] > 0, 0, 1), c[1]

        return jax.lax.while_loop(lambda c: c[0] < c[1], step, (jnp.int32(0), x))[0]

    exp = jax.export.export(jax.jit(loop))(jax.ShapeDtypeStruct((), jnp.int32))
    jaxport.save(exp, path)


def test_run_stops_a_looping_module_at_its_timeout(tmp_path):
    import numpy as np

    _looping_archive(tmp_path / "loop.jaxport")
    np.savez(tmp_path / "in.npz", np.int32(5))
    jaxport_cmd = Path(sys.executable).with_name("jaxport")
    done = subprocess.run(
        [str(jaxport_cmd), "run", "loop.jaxport", "-i", "in.npz", "--timeout", "2"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("TimeLimitError: the function did not finish within 2 s")
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "loop-out.npz").exists()


def test_run_in_python_raises_time_limit_error(tmp_path):
    import numpy as np

    import jaxport
    from jaxport._cli.runner import call_in_child

    _looping_archive(tmp_path / "loop.jaxport")
    np.savez(tmp_path / "in.npz", np.int32(5))
    with pytest.raises(jaxport.TimeLimitError) as raised:
        call_in_child(tmp_path / "loop.jaxport", None, tmp_path / "in.npz", timeout=1)
    assert isinstance(raised.value, TimeoutError) and raised.value.seconds == 1
    np.savez(tmp_path / "neg.npz", np.int32(-5))  # the same function ends on this input
    data, summaries = call_in_child(tmp_path / "loop.jaxport", None, tmp_path / "neg.npz")
    assert [s.name for s in summaries] == ["out"] and data.startswith(b"PK")


def test_a_program_that_cannot_start_is_an_os_error_as_popen_says(tmp_path):
    not_executable = tmp_path / "script"
    not_executable.write_text("#!/bin/sh\n")
    for cmd, error in [
        ([str(tmp_path / "missing")], FileNotFoundError),
        (["no-such-command-jaxport"], FileNotFoundError),
        ([str(not_executable)], PermissionError),
    ]:
        with pytest.raises(error):
            _children.run(cmd, timeout=10)


@pytest.mark.parametrize("worker", ["sandbox", "audit"])
def test_a_long_lived_worker_ends_by_its_own_deadline(tmp_path, worker):
    """A request the worker blocks on (its file is a FIFO nobody writes) while its parent
    does not watch: the request's own alarm ends the worker DEADLINE_GRACE s after the
    parent's time limit, with nobody killing it."""
    from jaxport.export import _sandbox

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    if worker == "sandbox":
        cmd = [sys.executable, "-I", str(_sandbox._WORKER), "0"]
        request = {"path": str(fifo), "size": 1, "deadline": 0.5}
    else:
        cmd = [sys.executable, "-P", "-m", "jaxport.audit._worker"]
        request = {"archive": str(fifo), "examples": None, "platform": None, "deadline": 0.5}
    process = subprocess.Popen(
        cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=tmp_path, text=True
    )
    try:
        assert process.stdout.readline()  # started
        process.stdin.write(json.dumps(request) + "\n")
        process.stdin.flush()
        process.wait(timeout=120)
    finally:
        process.kill()
        process.wait()
        process.stdin.close()
        process.stdout.close()
    assert process.returncode == -signal.SIGALRM


def test_the_run_childs_errors_are_rebuilt_as_their_class():
    import jaxport
    from jaxport._cli.runner import _rebuilt

    said = "bad section (/tmp/x.jaxport, at byte 7)"
    error = _rebuilt({"type": "CorruptArchiveError", "message": said,
                      "attributes": {"offset": 7, "path": "/tmp/x.jaxport"}})  # fmt: skip
    assert isinstance(error, jaxport.CorruptArchiveError) and str(error) == said
    assert (error.offset, error.path) == (7, "/tmp/x.jaxport")
    missing = _rebuilt({"type": "MissingCustomCallError", "message": "no target",
                        "attributes": {"targets": ["t"], "fun_name": "f"}})  # fmt: skip
    assert isinstance(missing, jaxport.MissingCustomCallError) and str(missing) == "no target"
    other = _rebuilt({"type": "KeyError", "message": "x", "attributes": {}})
    assert isinstance(other, jaxport.RunError) and str(other) == "KeyError: x"


_FORKED = """
import os
from jaxport import _children
_children.run(["true"], timeout=30)  # the spawner thread runs here
pid = os.fork()
if pid == 0:  # the copy has no spawner thread: it starts its own
    done = _children.run(["echo", "copy"], timeout=30)
    os._exit(0 if done.stdout == b"copy\\n" else 1)
_, status = os.waitpid(pid, 0)
raise SystemExit(os.waitstatus_to_exitcode(status))
"""


def test_a_forked_copy_of_the_process_starts_children_too(tmp_path):
    # in a process of its own, without jax (which warns on any fork)
    done = subprocess.run([sys.executable, "-P", "-c", _FORKED], cwd=tmp_path, timeout=120)
    assert done.returncode == 0
