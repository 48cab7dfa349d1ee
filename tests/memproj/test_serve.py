"""The `make run` supervisor with real child processes and real signals: a
child killed with SIGKILL comes back, the others keep their pids, a crash loop
backs off, and SIGTERM still stops everything. As root, the worker runs without
Celery's root warning (the supervisor's one line explains it instead)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from memproj.serve import Supervisor

ROOT = Path(__file__).resolve().parents[2]
SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]
CRASHER = [sys.executable, "-c", "raise SystemExit(3)"]


def start_supervisor(processes: dict[str, list[str]], **options: float) -> subprocess.Popen[str]:
    code = (
        "import json, sys; from memproj.serve import Supervisor; "
        "Supervisor(json.loads(sys.argv[1]), **json.loads(sys.argv[2])).run()"
    )
    return subprocess.Popen(
        [sys.executable, "-u", "-c", code, json.dumps(processes), json.dumps(options)],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def read_until(proc: subprocess.Popen[str], needle: str, seen: list[str]) -> str:
    """Read the supervisor's log up to the first line containing needle (the
    pytest timeout turns a missing line into a failure)."""
    assert proc.stdout is not None
    for line in proc.stdout:
        seen.append(line)
        if needle in line:
            return line
    pytest.fail(f"supervisor ended before {needle!r}:\n{''.join(seen)}")


def child_pids(proc: subprocess.Popen[str]) -> dict[str, int]:
    """name -> pid of the supervisor's children (name = the marker in argv)."""
    children = psutil.Process(proc.pid).children()
    pids = {}
    for child in children:
        try:
            argv = child.cmdline()
        except (psutil.ZombieProcess, psutil.NoSuchProcess):
            continue  # a crashed child the supervisor has not reaped yet (the crash loop's)
        with_marker = [a for a in argv if a.startswith("#")]
        if with_marker:
            pids[with_marker[0][1:]] = child.pid
    return pids


def named(name: str, command: list[str]) -> list[str]:
    # An extra argv entry names the child in `ps`; python ignores it.
    return [*command, f"#{name}"]


@pytest.fixture
def supervisor() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_a_killed_child_is_restarted_and_the_others_keep_serving(supervisor):
    proc = start_supervisor(
        {name: named(name, SLEEPER) for name in ("web", "worker", "beat")}, backoff_base=0.2, poll_interval=0.05
    )
    supervisor.append(proc)
    seen: list[str] = []
    read_until(proc, "started", seen)
    before = child_pids(proc)
    assert set(before) == {"web", "worker", "beat"}

    os.kill(before["worker"], signal.SIGKILL)
    crash = read_until(proc, "exited", seen)
    assert f"worker (pid {before['worker']}) exited with -9" in crash and "the others keep running" in crash
    read_until(proc, "worker restarted", seen)

    after = child_pids(proc)
    assert after["worker"] != before["worker"] and psutil.pid_exists(after["worker"])
    assert after["web"] == before["web"] and after["beat"] == before["beat"]
    assert proc.poll() is None

    # SIGTERM (and Ctrl-C) still stop everything, restarted child included.
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    for pid in after.values():
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_a_crash_loop_backs_off_exponentially_up_to_the_cap(supervisor):
    proc = start_supervisor(
        {"web": named("web", SLEEPER), "beat": named("beat", CRASHER)},
        backoff_base=0.05,
        backoff_max=0.4,
        poll_interval=0.02,
    )
    supervisor.append(proc)
    seen: list[str] = []
    read_until(proc, "started", seen)
    web = child_pids(proc)["web"]
    delays = []
    for _ in range(6):
        line = read_until(proc, "beat (pid", seen)
        assert "exited with 3" in line
        delays.append(float(line.split("restarting it in ")[1].split(" s")[0]))
    assert delays == [0.05, 0.1, 0.2, 0.4, 0.4, 0.4]
    assert child_pids(proc)["web"] == web
    proc.send_signal(signal.SIGINT)
    assert proc.wait(30) == 0


def test_backoff_schedule():
    supervisor = Supervisor({}, backoff_base=1, backoff_max=30)
    assert [supervisor.backoff(n) for n in range(1, 8)] == [1, 2, 4, 8, 16, 30, 30]


def test_a_child_that_ran_long_enough_restarts_from_the_base_delay(monkeypatch):
    supervisor = Supervisor({"web": SLEEPER}, backoff_base=1, backoff_max=30, stable_after=60)
    child = supervisor.children["web"]
    child.crashes = 4
    child.process = subprocess.Popen([sys.executable, "-c", "pass"])
    child.process.wait()
    now = time.monotonic()
    child.started_at = now - 120  # up for two minutes before it died
    supervisor.check()
    assert child.crashes == 1 and child.restart_at is not None and child.restart_at - now < 2


def test_as_root_the_worker_runs_without_celerys_root_warning():
    """As root, memproj.serve explains in one line of its own why the worker
    runs as root, and the worker's command filters Celery's multi-line warning
    out, narrowly: by its message, and only for root."""
    from memproj.serve import CELERY_ROOT_WARNING, PROCESSES, commands_for

    assert commands_for(1000) == {name: list(command) for name, command in PROCESSES.items()}
    as_root = commands_for(0)
    worker = as_root["worker"]
    assert worker[:3] == [sys.executable, "-W", f"ignore:{CELERY_ROOT_WARNING}"]
    assert worker[3:] == PROCESSES["worker"][1:]
    assert {name: as_root[name] for name in ("web", "beat")} == {name: PROCESSES[name] for name in ("web", "beat")}

    # Celery's own warning, as its worker raises it for root: silenced by the filter only.
    warn = "from celery.platforms import _warn_or_raise_security_error as warn; warn(0, 0, 0, 0, False)"
    loud = subprocess.run([sys.executable, "-c", warn], capture_output=True, text=True, timeout=60, check=True)
    assert "SecurityWarning: You're running the worker with superuser privileges" in loud.stderr
    quiet = subprocess.run([*worker[:3], "-c", warn], capture_output=True, text=True, timeout=60, check=True)
    assert quiet.stderr == ""
    other = "import warnings; warnings.warn('another warning')"
    kept = subprocess.run([*worker[:3], "-c", other], capture_output=True, text=True, timeout=60, check=True)
    assert "another warning" in kept.stderr
