"""Probes of the app's server and its worker pool for ``python -m bench faults`` (issue 60):

- item 1, DNS rebinding: a web page on any domain that resolves to 127.0.0.1 reaches the local
  server with that domain in its ``Host`` header. A websocket upgrade to ``/_stcore/stream``
  naming a foreign host must get no ``101 Switching Protocols``; one naming 127.0.0.1 must.
- item C, two apps on one BASIN_HOME: both use one worker pool; when the first app stops, the
  other's run still completes, and the pool stops only after the last app.

Each probe runs its own processes and returns a CompletedProcess whose stdout says what it saw.
"""

from __future__ import annotations

import base64
import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from bench.faults import LIMIT_S, ROOT
from bench.server import serve
from runs.pool import stop_supervisor, supervisor_pid
from runs.spec import parse_spec
from runs.store import Store

FOREIGN = "evil.example"
# a few seconds of sampling with no compile: long enough to outlive the first app's exit
RUN = {
    "target": {"name": "banana"},
    "sampler": {"name": "mala", "params": {"step_size": 0.1}},
    "chains": 4,
    "steps": 12_000,
    "compile": "never",
    "device": "cpu",
    "seed": 3,
}
# an app as the pool sees one: a process that found or started the pool, owning it
APP = (
    "import sys, time\n"
    "from runs.pool import ensure_supervisor\n"
    "from runs.store import Store\n"
    "print(ensure_supervisor(Store(sys.argv[1]), owned=True), flush=True)\n"
    "time.sleep(600)\n"
)


def upgrade(port: int, host: str) -> str:
    """The status line the server answers a websocket upgrade of /_stcore/stream naming
    ``host`` (with the port) in its Host header; "" if it closed without a word."""
    key = base64.b64encode(os.urandom(16)).decode()
    request = (
        "GET /_stcore/stream HTTP/1.1\r\n"
        f"Host: {host}:{port}\r\n"
        "Upgrade: websocket\r\n"
        "Connection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\n"
        "Sec-WebSocket-Version: 13\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
        conn.sendall(request.encode())
        reply = b""
        while b"\r\n" not in reply:
            chunk = conn.recv(4096)
            if not chunk:
                break
            reply += chunk
    return reply.split(b"\r\n", 1)[0].decode("latin-1")


def foreign_host(home: Path) -> subprocess.CompletedProcess:
    """``streamlit run app.py`` on a free 127.0.0.1 port, asked to upgrade from each host."""
    with serve(home / "store", home / "streamlit.log") as url:
        port = int(url.rsplit(":", 1)[1])
        lines = [f"{host}: {upgrade(port, host)}" for host in (FOREIGN, "127.0.0.1")]
    return subprocess.CompletedProcess(["upgrade"], 0, "\n".join(lines) + "\n", "")


def refused_foreign(out: subprocess.CompletedProcess) -> bool:
    said = dict(line.split(": ", 1) for line in out.stdout.splitlines())
    return " 101 " not in said[FOREIGN] and " 101 " in said["127.0.0.1"]


def start_app(home: Path) -> tuple[subprocess.Popen, int]:
    """A stand-in app on ``home`` and the pid of the pool it found or started."""
    env = {**os.environ, "BASIN_HOME": str(home)}
    app = subprocess.Popen(
        [sys.executable, "-c", APP, str(home)], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True
    )
    line = app.stdout.readline()  # printed once the pool is there
    if not line.strip().isdigit():
        app.kill()
        raise RuntimeError(f"the stand-in app found no pool (said {line!r})")
    return app, int(line)


def wait(condition: Callable[[], object], timeout: float = LIMIT_S):
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"not within {timeout:.0f} s")
        time.sleep(0.05)
    return value


def stop(app: subprocess.Popen) -> None:
    app.kill()
    app.wait(10)


def shared_pool(home: Path) -> subprocess.CompletedProcess:
    """Two apps on one store; the first stops while a run goes on; the run's status at its end
    and whether the pool still serves; then the second stops and the pool must follow."""
    store = Store(home)
    first, pool = start_app(home)
    second = start_app(home)[0]
    try:
        run_id = store.create(parse_spec(RUN).model_dump(mode="json"))
        wait(lambda: store.get(run_id).status != "queued" and store.records(run_id) > 0)
        stop(first)
        wait(lambda: store.get(run_id).status not in ("queued", "running"))
        lines = [f"run: {store.get(run_id).status}"]
        lines.append(f"pool after the first app: {_state(store, pool)}")
        stop(second)
        with contextlib.suppress(TimeoutError):  # still serving: the line below says so
            wait(lambda: supervisor_pid(store) is None, timeout=30)
        lines.append(f"pool after the last app: {_state(store, pool)}")
    finally:
        for app in (first, second):
            stop(app)
        stop_supervisor(store)
    return subprocess.CompletedProcess(["two apps"], 0, "\n".join(lines) + "\n", "")


def _state(store: Store, pool: int) -> str:
    return "serving" if supervisor_pid(store) == pool else "stopped"


def pool_shared(out: subprocess.CompletedProcess) -> bool:
    return out.stdout.splitlines() == [
        "run: completed",
        "pool after the first app: serving",
        "pool after the last app: stopped",
    ]


def probes(home: Path) -> list[tuple[str, Callable[[], subprocess.CompletedProcess], Callable]]:
    """(name, setup running its own processes, check of what it saw)."""
    return [
        ("websocket with a foreign Host", lambda: foreign_host(home), refused_foreign),
        ("two apps, the first stops", lambda: shared_pool(home), pool_shared),
    ]
