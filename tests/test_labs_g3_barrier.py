"""g3's barrier script (benchmarks/labs/scripts/barrier.py) in real processes on loopback: W workers,
worker 0 at 127.0.0.1 instead of its JobSet DNS name. What the benchmark reads from their logs is
read here by the benchmark's own parser."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from benchmarks.labs.g3.placement import parse_worker_log

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "labs" / "scripts" / "barrier.py"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Workers:
    def __init__(self, workers: int, timeout_s: float, work_s: float = 0.2):
        self.env = {**os.environ, "WORKERS": str(workers), "COORDINATOR": "127.0.0.1", "BARRIER_PORT": str(_free_port()),
                    "RENDEZVOUS_TIMEOUT_S": str(timeout_s), "WORK_S": str(work_s)}  # fmt: skip
        self.procs: dict[int, subprocess.Popen] = {}

    def start(self, index: int) -> None:
        self.procs[index] = subprocess.Popen(
            [sys.executable, str(SCRIPT)], env={**self.env, "JOB_COMPLETION_INDEX": str(index)},
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip

    def results(self) -> dict[int, tuple[int, dict[str, object]]]:
        """Per worker: exit status and {event: LogEvent}."""
        out = {}
        for i, p in self.procs.items():
            stdout, stderr = p.communicate(timeout=20)
            assert not stderr.strip() or p.returncode == 128 + signal.SIGTERM, stderr
            out[i] = (p.returncode, {e.event: e for e in parse_worker_log(stdout)})
        return out


def test_all_present_all_pass_together():
    w = Workers(3, timeout_s=5)
    for i in range(3):
        w.start(i)
        time.sleep(0.2)
    got = w.results()
    assert {i: code for i, (code, _) in got.items()} == {0: 0, 1: 0, 2: 0}
    last_arrival = max(ev["arrived"].at for _, ev in got.values())
    released = [ev["released"].at for _, ev in got.values()]
    assert all(r >= last_arrival for r in released)  # nobody through before the last one arrived
    assert max(released) - min(released) < timedelta(seconds=0.5)
    assert all("finished" in ev and "without computing" in ev["finished"].fields["work"] for _, ev in got.values())
    assert sorted(got[0][1]["released"].fields["peers"]) == [socket.gethostname()] * 2  # who joined worker 0


def test_one_missing_all_give_up_at_the_timeout():
    w = Workers(3, timeout_s=1.5)
    w.start(0)
    time.sleep(0.4)  # worker 1's own deadline comes later: worker 0 giving up is what ends its wait
    w.start(1)  # worker 2 never comes
    got = w.results()
    assert {i: code for i, (code, _) in got.items()} == {0: 1, 1: 1}
    arrived0 = got[0][1]["arrived"].at
    for code, ev in got.values():
        assert "released" not in ev and "gave_up" in ev
        waited = (ev["gave_up"].at - arrived0).total_seconds()
        assert 1.4 <= waited <= 2.5, waited  # worker 0's timeout ends both
    assert got[0][1]["gave_up"].fields["reason"] == "rendezvous timeout 1.5 s: 2 of 3 workers arrived"
    assert got[1][1]["gave_up"].fields["reason"] == "worker 0 gave up (it closed the connection)"


def test_a_missing_worker_0_leaves_the_others_to_their_own_timeout():
    w = Workers(3, timeout_s=1.0)
    w.start(1)
    w.start(2)
    got = w.results()
    for code, ev in got.values():
        assert code == 1
        assert 0.9 <= (ev["gave_up"].at - ev["arrived"].at).total_seconds() <= 2.0
        assert ev["gave_up"].fields["reason"].startswith("rendezvous timeout 1 s: worker 0 at 127.0.0.1:")


def test_a_late_arrival_inside_the_timeout_passes():
    w = Workers(3, timeout_s=3.0)
    w.start(0)
    w.start(1)
    time.sleep(1.5)  # half the timeout
    late_started = datetime.now(timezone.utc)
    w.start(2)
    got = w.results()
    assert {i: code for i, (code, _) in got.items()} == {0: 0, 1: 0, 2: 0}
    late = got[2][1]["arrived"].at
    # Workers 0 and 1 were waiting before worker 2 even started: not a margin on process start-up times, which
    # a loaded machine stretches (CI once saw arrivals 1.30 s apart for starts 1.5 s apart).
    assert all(got[i][1]["arrived"].at < late_started <= late for i in (0, 1))
    assert all(ev["released"].at >= late for _, ev in got.values())


@pytest.mark.skipif(sys.platform == "win32", reason="SIGTERM")
def test_a_worker_stopped_while_waiting_says_so():
    """The Job controller stops the other workers of a failed job with SIGTERM."""
    w = Workers(3, timeout_s=10.0)
    w.start(1)
    time.sleep(0.5)
    w.procs[1].send_signal(signal.SIGTERM)
    code, events = w.results()[1]
    assert code == 128 + signal.SIGTERM
    assert events["terminated"].fields["signal"] == signal.SIGTERM and "gave_up" not in events
