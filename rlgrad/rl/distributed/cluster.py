"""Finding Ray: a local instance by default, a running cluster by its address.

``connect(address)``: with no address (and no ``RAY_ADDRESS`` in the environment) Ray starts
locally, sized to the machine (or to ``RLGRAD_RAY_CPUS``, ``--ray-cpus``), without its
dashboard; with ``host:port`` or ``ray://host:port`` the address is first probed (a TCP
connection and gRPC's HTTP/2 handshake, a few seconds at most), so that a typo, a stopped
cluster or another server at that port is one clear line instead of Ray's long retry loop.
A local Ray is torn down with the process that started it, however that process ends
(``watchdog.py``).
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

#: seconds the probe of a cluster address may take
PROBE_TIMEOUT_S = 3.0
#: the CPUs of a local Ray started by rlgrad (``--ray-cpus``), when no ``num_cpus`` is given
CPUS_VAR = "RLGRAD_RAY_CPUS"
#: what an HTTP/2 client sends first (RFC 9113, 3.4), then an empty SETTINGS frame: Ray's
#: GCS and Ray Client servers are gRPC, which answers with a SETTINGS frame of its own
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
INSTALL_HINT = "pip install 'rlgrad[ray]'"
#: the environment variable that marks the processes of a local Ray rlgrad started
TOKEN_VAR = "RLGRAD_RAY_TOKEN"
#: the watchdog of the local Ray this process started last (``watchdog.py``)
_watchdog: subprocess.Popen[bytes] | None = None


def import_ray() -> Any:
    """The ``ray`` module, or an ImportError of one line saying how to install it."""
    try:
        import ray
    except ImportError as e:
        raise ImportError(f"env runners need Ray, which is not installed ({e}); "
                          f"install it with: {INSTALL_HINT}") from None
    return ray


def _host_port(address: str) -> tuple[str, int] | None:
    """(host, port) of ``host:port`` / ``ray://host:port``; None for ``auto`` / ``local``."""
    addr = address.removeprefix("ray://")
    if addr in ("auto", "local"):
        return None
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise ValueError(f"Ray address {address!r}: expected host:port (e.g. 127.0.0.1:6379, "
                         "what `ray start --head` prints), ray://host:port, or auto")
    return host.strip("[]"), int(port)


def check_cpus(cpus: int | None) -> int | None:
    """``cpus`` (or ``RLGRAD_RAY_CPUS``) as a whole number of at least 1, or None."""
    raw = cpus if cpus is not None else os.environ.get(CPUS_VAR) or None
    if raw is None:
        return None
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"--ray-cpus / {CPUS_VAR} must be a whole number of CPUs of at least 1, "
                         f"got {raw!r}")
    return n


def _speaks_grpc(sock: socket.socket) -> bool:
    """Whether the server behind ``sock`` answers an HTTP/2 preface with a SETTINGS frame."""
    sock.sendall(_H2_PREFACE)
    head = b""
    while len(head) < 9:
        chunk = sock.recv(9 - len(head))
        if not chunk:
            return False
        head += chunk
    return head[3] == 4  # the frame's type: SETTINGS


def probe(address: str, timeout: float = PROBE_TIMEOUT_S) -> None:
    """ConnectionError (one line, within ``timeout`` or so) if nothing listens at ``address``
    or what listens is not a Ray cluster (``ray.init`` would wait on it for a long time)."""
    hp = _host_port(address)
    if hp is None:
        return
    try:
        with socket.create_connection(hp, timeout=timeout) as sock:
            sock.settimeout(timeout)
            try:
                ok = _speaks_grpc(sock)
            except OSError:  # a timeout, a reset: not a gRPC server
                ok = False
    except OSError as e:
        why = e.strerror or type(e).__name__
        raise ConnectionError(f"cannot reach the Ray cluster at {address} ({why}): start one "
                              "with `ray start --head` on that machine, or check the address "
                              "(--ray-address / RAY_ADDRESS)") from None
    if not ok:
        raise ConnectionError(f"what listens at {address} is not a Ray cluster (no gRPC answer "
                              f"within {timeout:g} s): give the address `ray start --head` "
                              "printed (--ray-address / RAY_ADDRESS)")


def connect(address: str | None = None, num_cpus: int | None = None,
            log_to_driver: bool = True) -> bool:
    """Initialise Ray unless it already is; returns True if this call started it.

    ``address``: None (or ``"local"``) starts a local instance unless ``RAY_ADDRESS`` is set;
    ``"auto"`` joins the cluster started on this machine with ``ray start``; ``host:port``
    joins that cluster's head. ``log_to_driver=False``: the workers' output is not printed here.
    """
    ray = import_ray()
    if ray.is_initialized():
        return False
    address = address or os.environ.get("RAY_ADDRESS") or "local"
    probe(address)
    opts: dict[str, Any] = {"logging_level": logging.ERROR, "log_to_driver": log_to_driver}
    if address == "local":
        opts.update(num_cpus=num_cpus if num_cpus is not None else check_cpus(None),
                    include_dashboard=False)
    # ray.init replaces SIGTERM's handler with sys.exit: keep the caller's (rlgrad train's
    # handler checkpoints before it stops)
    main = threading.current_thread() is threading.main_thread()
    term = signal.getsignal(signal.SIGTERM) if main else None
    token = _watch() if address == "local" else None
    try:
        _init(ray, address, opts)
    except ConnectionError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConnectionError(f"cannot connect to the Ray cluster at {address}: {first}") from None
    finally:
        if token is not None:  # only Ray's processes, started by ray.init, carry it
            os.environ.pop(TOKEN_VAR, None)
        if main and term is not None:
            signal.signal(signal.SIGTERM, term)
    _quiet_worker_deaths()
    return True


def _watch() -> str | None:
    """Starts ``watchdog.py`` for the local Ray about to be started and puts its token in this
    process's environment (for ``ray.init`` to hand on); the token, or None without ``/proc``."""
    global _watchdog
    if not os.path.isdir("/proc"):
        return None
    if _watchdog is not None:  # the previous local Ray's: shut down already, its watch ends
        _watchdog.stdin.close()  # type: ignore[union-attr]
        _watchdog.wait()
    token = f"rlgrad-ray-{uuid.uuid4().hex}"
    env = {k: v for k, v in os.environ.items() if k != TOKEN_VAR}
    _watchdog = subprocess.Popen(
        [sys.executable, "-S", str(Path(__file__).with_name("watchdog.py")), token,
         str(os.getpid())], stdin=subprocess.PIPE, env=env, start_new_session=True)
    os.environ[TOKEN_VAR] = token
    return token


def _init(ray: Any, address: str, opts: dict[str, Any], attempts: int = 2) -> None:
    """``ray.init``; a local node that did not come up within Ray's fixed 30 s (its processes
    starved on a loaded machine) is started once more, then said in one line."""
    for attempt in range(1, attempts + 1):
        try:
            ray.init(address=address, **opts)
            return
        except Exception as e:  # Ray raises a bare Exception for this one
            if address != "local" or "timed out during startup" not in str(e):
                raise
            ray.shutdown()  # the half-started node's processes
            if attempt == attempts:
                raise ConnectionError(f"Ray's local node did not start within 30 s, {attempts} "
                                   "times (an overloaded machine?): try again, or start Ray "
                                   "with `ray start --head` and pass --ray-address auto") from None
            print("rlgrad: warning: Ray's local node did not start within 30 s; starting it "
                  "again", file=sys.stderr)


def _quiet_worker_deaths() -> None:
    """Drop the raylet's report of a worker that died (a paragraph of ids and common causes,
    printed by the driver) from the output of a Ray rlgrad started: a runner's death is said in
    rlgrad's own line, and a trial's or a seed's in their summaries. Ray's other messages stay.
    (Ray's printing function is looked up by its callers at each message.)"""
    try:
        from ray._private import worker
    except ImportError:  # another Ray layout: its report stays
        return
    shown = worker.print_worker_logs
    if getattr(shown, "rlgrad_quiet", False):
        return

    def quiet(data: dict[str, Any], *args: Any, **kwargs: Any) -> None:
        lines = [ln for ln in data.get("lines", ()) if "worker died or was killed" not in str(ln)]
        if lines:
            shown({**data, "lines": lines}, *args, **kwargs)

    quiet.rlgrad_quiet = True  # type: ignore[attr-defined]
    worker.print_worker_logs = quiet


def free_cpus(wait_for: float = 0.0, timeout: float = 5.0) -> float:
    """CPUs of the Ray cluster (all nodes) that no actor or task holds now; waits up to
    ``timeout`` seconds for ``wait_for`` of them if the cluster has that many (actors just
    killed hand their CPUs back a moment later)."""
    ray = import_ray()
    free = lambda: float(ray.available_resources().get("CPU", 0.0))
    end = time.monotonic() + timeout
    total = float(ray.cluster_resources().get("CPU", 0.0))
    while free() < min(wait_for, total) and time.monotonic() < end:
        time.sleep(0.1)
    return free()


def runner_cpus(n_runners: int, warn: Any = None) -> float:
    """CPUs each of ``n_runners`` runners asks Ray for: 1, or a share when there are more
    runners than free CPUs (so that all of them start, sharing the cores, instead of waiting
    for CPUs that never come), with a warning."""
    cpus = free_cpus(wait_for=n_runners)
    if n_runners <= cpus:
        return 1.0
    msg = (f"rlgrad: warning: {n_runners} env runners but the Ray cluster has {cpus:g} free "
           "CPUs: the runners will share them (slower than fewer runners with more envs each)")
    (warn or (lambda m: print(m, file=sys.stderr)))(msg)
    return max(cpus, 0.0) / n_runners
