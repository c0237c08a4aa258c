"""Tears down a local Ray that rlgrad started when its driver dies, even by ``kill -9``.

Ray's head processes (GCS, raylet) die with the driver (they share its fate), but the processes
the raylet started (``ray::DashboardAgent``, ``ray::RuntimeEnvAgent``, idle workers) may live on
for many seconds. ``cluster.connect`` starts Ray with a token in its environment, which every Ray
process inherits, and runs this file (by its path, so that nothing but the standard library is
loaded) in a session of its own, holding the read end of a pipe whose write end only the driver
has. When the pipe closes (the driver exited, however it died), every process of this user whose
environment holds the token is sent SIGTERM, then SIGKILL from one second on, until none is left.

Linux only (``/proc``); elsewhere ``connect`` does not start it.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path


def marked(token: bytes, skip: set[int]) -> list[int]:
    """Pids of this user's processes whose environment holds ``token`` (other than ``skip``)."""
    pids = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit() or int(p.name) in skip:
            continue
        try:
            if token in (p / "environ").read_bytes():
                pids.append(int(p.name))
        except OSError:  # gone, or another user's
            continue
    return pids


def sweep(token: bytes, skip: set[int], grace: float = 1.0, limit: float = 10.0) -> list[int]:
    """SIGTERM to the marked processes, SIGKILL to those left after ``grace`` seconds, again
    and again (a worker the raylet was starting may appear late) until none is left or
    ``limit`` seconds have passed; returns those left."""
    start = time.monotonic()
    while True:
        pids = marked(token, skip)
        waited = time.monotonic() - start
        if not pids or waited > limit:
            return pids
        for pid in pids:
            try:
                os.kill(pid, signal.SIGTERM if waited < grace else signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.1)


def main(argv: list[str]) -> int:
    """``watchdog.py TOKEN DRIVER_PID``: waits for end of file on stdin, then sweeps."""
    token, driver = argv[0].encode(), int(argv[1])
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C stops the driver, not the watch
    while sys.stdin.buffer.read(4096):
        pass
    sweep(token, {os.getpid(), driver})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
