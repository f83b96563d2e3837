"""The fork server behind ``run.workers``: the runner's worker command reports the forked worker's exit
status as its own, and nothing of the server is left once it is closed. (That the workers produce the
in-process run's bytes is test_determinism's.)"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from chunkline.pipelines.forked_workers import WorkerForkServer, start_fork_server

pytestmark = pytest.mark.timeout(120)


def live_children() -> set[int]:
    """This process's child processes that have not exited (Linux's /proc)."""
    children = set()
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        for pid in (task / "children").read_text().split():
            try:
                state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except FileNotFoundError:
                continue
            if state != "Z":
                children.add(int(pid))
    return children


def test_a_worker_without_a_control_endpoint_fails_and_its_command_says_so(capfd):
    before = live_children()
    with start_fork_server() as server:
        assert isinstance(server, WorkerForkServer)
        assert live_children() - before  # the server runs
        environment = {name: value for name, value in os.environ.items() if "API_SERVICE" not in name}
        # As the runner starts a worker: through the shell, with the endpoints in the environment (here none:
        # Beam's harness cannot start without its control endpoint).
        finished = subprocess.run(server.worker_command, shell=True, env=environment, timeout=60)
        assert finished.returncode != 0
    # The forked worker's traceback is on the driver's stderr, as a worker process of Beam's own prints it.
    assert "KeyError: 'CONTROL_API_SERVICE_DESCRIPTOR'" in capfd.readouterr().err
    assert live_children() == before
    assert not Path(server.socket_path).parent.exists()


def test_closing_a_server_that_forked_nothing_leaves_nothing():
    before = live_children()
    server = start_fork_server()
    server.close()
    server.close()  # closing twice is harmless
    assert live_children() == before
