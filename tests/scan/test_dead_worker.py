"""A local worker killed mid-node (the kernel's OOM killer, a user's kill): the scan goes
on, the node's row says so, and nothing of the worker's is left in the temp directory."""

import os
import signal
import tempfile
import threading
import time

from kvforensics.scan import NodeSpec, ScanOptions
from kvforensics.scan.engines import run_local
from tests.conftest import FIXTURES

CLEAN = FIXTURES / "logs" / "clean" / "pp0.log"
#: a node that takes its worker a few seconds: time to kill it mid-node
SLOW = FIXTURES / "logs" / "incident" / "pp0.log"


def _workers() -> list[int]:
    """This process's pool workers (spawned children)."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                spawned = b"spawn_main" in fh.read()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == os.getpid() and spawned:
            out.append(int(pid))
    return out


def _node_dirs(temp) -> set:
    """The directories a node's URL was fetched into (its first file goes to ``0/``)."""
    return {d.parent for d in temp.rglob("0") if d.parent.name.startswith("kvf-scan-")}


def test_a_killed_worker_leaves_no_temp_dir_and_its_node_says_it_died(tmp_path, monkeypatch):
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))  # this process
    monkeypatch.setenv("TMPDIR", str(temp))  # the workers it spawns
    specs = [NodeSpec("url", (SLOW.as_uri(),)), NodeSpec("clean", (str(CLEAN),))]
    got: list = []
    scan = threading.Thread(target=lambda: got.extend(run_local(specs, ScanOptions(), jobs=2)))
    scan.start()
    seen: set = set()
    kills = 0
    deadline = time.monotonic() + 300
    while scan.is_alive() and kills < 2 and time.monotonic() < deadline:
        fresh = _node_dirs(temp) - seen
        if not fresh:  # the URL node's worker has not fetched it yet
            time.sleep(0.05)
            continue
        seen |= fresh
        for pid in _workers():
            os.kill(pid, signal.SIGKILL)
        kills += 1
    scan.join(timeout=300)
    assert not scan.is_alive()
    assert kills == 2  # once on the pool, once alone
    url, clean = got
    assert url.node == "url" and "died" in url.error
    assert clean.error is None and clean.rounds > 0
    assert list(temp.iterdir()) == []
