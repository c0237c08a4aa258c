"""Tears down a local Ray that rlgrad started when its driver dies, even by ``kill -9``.

Ray's head processes (GCS, raylet) die with the driver (they share its fate), but the processes
the raylet started (``ray::DashboardAgent``, ``ray::RuntimeEnvAgent``, idle workers) may live on
for many seconds. ``cluster.connect`` starts Ray with a token in its environment, which every Ray
process inherits, and runs this file (by its path, so that nothing but the standard library is
loaded) in a session of its own, holding the read end of a pipe whose write end only the driver
has. When the pipe closes (the driver exited, however it died), every Ray process of the driver
is sent SIGTERM, then SIGKILL from one second on, until none is left.

Which processes are the driver's Ray: those below the driver whose environment holds the token,
and every process below one of them. The token alone is not enough: a process that sets its
title (``ray::DashboardAgent``) may overwrite its environment block, so ``/proc/PID/environ``
no longer shows the token (measured: the agents showed 7 to 29 of their 43 variables). So while
the driver lives, this watch notes the family every ``POLL`` seconds (pid and start time, so a
reused pid is never hit) — the agents are noted while their parent, the raylet, still lives.

Linux only (``/proc``); elsewhere ``connect`` does not start it.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time
from pathlib import Path

POLL = 0.5  # seconds between two notes of the family while the driver lives
Process = tuple[int, int]  # (pid, start time in clock ticks since boot)


def processes() -> dict[int, Process]:
    """Every process's pid -> (parent pid, start time)."""
    table = {}
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:  # the fields after the command name, which may hold spaces and parentheses
            fields = (p / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):  # gone
            continue
        table[int(p.name)] = (int(fields[1]), int(fields[19]))
    return table


def carries(pid: int, token: bytes) -> bool:
    """Whether ``pid``'s environment shows ``token``."""
    try:
        return token in Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:  # gone, or another user's
        return False


def family(token: bytes, roots: set[int], table: dict[int, Process],
           inside: set[int] = frozenset()) -> set[Process]:
    """(pid, start) of the processes below ``roots`` that carry ``token`` or descend from one
    that does; a root in ``inside`` counts as carrying it."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    found: set[Process] = set()
    stack = [(root, root in inside) for root in roots]
    while stack:
        pid, ray = stack.pop()
        for child in children.get(pid, ()):
            mine = ray or carries(child, token)
            if mine:
                found.add((child, table[child][1]))
            stack.append((child, mine))
    return found


def alive(noted: set[Process], table: dict[int, Process]) -> set[int]:
    """The pids of ``noted`` that still run (same pid, same start time)."""
    return {pid for pid, start in noted if pid in table and table[pid][1] == start}


def targets(token: bytes, noted: set[Process], skip: set[int]) -> set[int]:
    """The noted processes still alive, those that carry the token, and all below them."""
    table = processes()
    roots = alive(noted, table) | {pid for pid in table if carries(pid, token)}
    roots -= skip
    return (roots | {pid for pid, _ in family(token, roots, table, inside=roots)}) - skip


def sweep(token: bytes, noted: set[Process], skip: set[int], grace: float = 1.0,
          limit: float = 10.0) -> set[int]:
    """SIGTERM to the driver's Ray processes, SIGKILL to those left after ``grace`` seconds,
    again and again (a worker the raylet was starting may appear late) until none is left or
    ``limit`` seconds have passed; returns those left."""
    start = time.monotonic()
    while True:
        pids = targets(token, noted, skip)
        waited = time.monotonic() - start
        if not pids or waited > limit:
            return pids
        for pid in pids:
            try:
                os.kill(pid, signal.SIGTERM if waited < grace else signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.1)


def watch(token: bytes, driver: int) -> set[Process]:
    """Notes the driver's Ray processes every ``POLL`` seconds until end of file on stdin;
    returns those noted that are still alive then."""
    noted: set[Process] = set()
    while True:
        ready, _, _ = select.select([0], [], [], POLL)
        if ready and not os.read(0, 4096):
            return noted
        table = processes()
        noted = {p for p in noted if table.get(p[0], (0, -1))[1] == p[1]}
        noted |= family(token, {driver}, table)


def main(argv: list[str]) -> int:
    """``watchdog.py TOKEN DRIVER_PID``: notes the driver's Ray until end of file on stdin,
    then sweeps it."""
    token, driver = argv[0].encode(), int(argv[1])
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C stops the driver, not the watch
    noted = watch(token, driver)
    sweep(token, noted, {os.getpid(), driver})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
