"""Interrupting a real `python -m benchmarks g6` (issue 15): Ctrl-C, SIGTERM and SIGKILL leave no
simulator or load generator running, keep the points measured so far, and say so in one line; with
`--stack`, the config restore says what it restores, streams its `pulumi up`, is not stopped by a
second Ctrl-C or SIGTERM, and a restore that fails names the command that finishes it.

Each run is a child process; the tests wait on what the run shows (a line on its stderr, a request
in flight at the simulator, a process gone), never on a fixed sleep."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from benchmarks.g6.result import G6Result
from benchmarks.g6.targets import ServerSettings, SimTarget
from benchmarks.harness import load_result
from fake_pulumi import fake_pulumi, pulumi_calls, release_path
from stack_outputs import program_outputs

REPO = Path(__file__).resolve().parents[1]
MODEL = "Qwen/Qwen2.5-0.5B-Instruct"
CONFIG_PATH = "vllm.max_num_seqs"
UP = ["up", "--yes", "--skip-preview", "-s", "g6"]
WAIT_S = 60.0  # an upper bound for what takes a second or two; never reached when all is well


def _until(what: str, check: Callable[[], object], timeout_s: float = WAIT_S) -> object:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"not seen within {timeout_s:.0f}s: {what}")


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat[stat.rindex(")") + 2:].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        kids = _children(todo.pop())
        out += kids
        todo += kids
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return state[state.rindex(")") + 2] != "Z"


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text().split("\0")
    except OSError:
        return []


class G6Run:
    """`python -m benchmarks g6 ARGS` as a child process whose stderr lines are collected as they come."""

    def __init__(self, args: list[str], env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks", "g6", *args], cwd=REPO, env=env or os.environ.copy(),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))

    def wait_line(self, pattern: str) -> str:
        return _until(f"a stderr line matching {pattern!r} (got {self.lines[-5:]})",
                      lambda: next((x for x in self.lines if re.search(pattern, x)), None))  # type: ignore[return-value]

    def send(self, sig: signal.Signals) -> None:
        self.proc.send_signal(sig)

    def finish(self) -> int:
        rc = self.proc.wait(timeout=WAIT_S)
        self._reader.join(timeout=WAIT_S)  # every line the run wrote
        return rc

    def stderr(self) -> str:
        return "\n".join(self.lines)


def _sim_of(run: G6Run) -> tuple[int, str]:
    """The simulator the run started (pid, base URL), once it exists."""

    def find() -> tuple[int, str] | None:
        for pid in _children(run.proc.pid):
            argv = _cmdline(pid)
            if "benchmarks.sim" in argv:
                return pid, f"http://127.0.0.1:{argv[argv.index('--port') + 1]}"
        return None

    return _until("the simulator process", find)  # type: ignore[return-value]


def _running(url: str) -> float:
    try:
        text = httpx.get(f"{url}/metrics", timeout=2).text
    except httpx.HTTPError:
        return 0.0
    match = re.search(r"^vllm:num_requests_running\{[^}]*\} (\S+)$", text, re.M)
    return float(match.group(1)) if match else 0.0


def _finished(url: str) -> int:
    try:
        return len(httpx.get(f"{url}/sim/requests", timeout=2).json())
    except httpx.HTTPError:
        return 0


# -- --sim: the simulator and the load generator never outlive the run ----------------------------

# Two points: the first quick (5 requests 4 at a time), the second slow enough to be interrupted in
# (6 requests one at a time, about 2 s).
SIM_ARGS = ["--sim", "--model", MODEL, "--max-num-seqs", "8", "--concurrency", "4,1", "--requests", "5",
            "--input-len", "32", "--output-len", "256", "--repeats", "1"]  # fmt: skip
FIRST_POINT = 4 + 5  # a warm-up request per worker, then the counted ones


def _second_point_running(run: G6Run) -> tuple[int, list[int]]:
    """Wait until the first point is done and the second in flight; the simulator's pid and every
    process the run has started."""
    sim, url = _sim_of(run)
    _until("the second point in flight", lambda: _finished(url) >= FIRST_POINT and _running(url) > 0)
    return sim, _descendants(run.proc.pid)


@pytest.mark.realtime
@pytest.mark.parametrize("sig, code, name", [(signal.SIGINT, 130, "Ctrl-C"), (signal.SIGTERM, 143, "SIGTERM")])
def test_an_interrupted_sim_run_keeps_its_points_and_leaves_no_process(sig, code, name, tmp_path):
    run = G6Run([*SIM_ARGS, "--out", str(tmp_path)])
    sim, started = _second_point_running(run)
    run.send(sig)
    assert run.finish() == code
    (folder,) = tmp_path.iterdir()
    assert run.lines[-1] == f"g6: interrupted after 1 of 2 points; partial results in {folder}"
    assert "Traceback" not in run.stderr() and "Unclosed" not in run.stderr()
    result = load_result(G6Result, folder)
    assert [(p.concurrency, p.completed) for p in result.points] == [(4, 5)]
    report = (folder / "report.md").read_text()
    assert f"interrupted ({name}) after 1 of 2 points: the rest was not measured" in report
    assert sim in started
    _until("every process the run started gone", lambda: not any(_alive(p) for p in started))


@pytest.mark.realtime
def test_the_simulator_stops_when_its_parent_is_killed_outright(tmp_path):
    """SIGKILL runs no cleanup: the simulator sees the pipe its parent held close, and exits."""
    run = G6Run([*SIM_ARGS, "--out", str(tmp_path)])
    sim, started = _second_point_running(run)
    run.send(signal.SIGKILL)
    assert run.finish() == -signal.SIGKILL
    _until("the simulator gone", lambda: not _alive(sim))
    _until("the load generator gone", lambda: not any(_alive(p) for p in started))


def _sim_serving(run: G6Run, model: str) -> str:
    """The URL of the run's simulator of `model`, once one serves a request."""

    def find() -> str | None:
        for pid in _children(run.proc.pid):
            argv = _cmdline(pid)
            if "benchmarks.sim" in argv and argv[argv.index("--model") + 1] == model:
                url = f"http://127.0.0.1:{argv[argv.index('--port') + 1]}"
                return url if _running(url) > 0 else None
        return None

    return _until(f"a simulator of {model} serving", find)  # type: ignore[return-value]


@pytest.mark.realtime
def test_an_interrupted_kv_experiment_keeps_what_its_probes_answered(tmp_path):
    from benchmarks.g6.experiments.kv import KvResult

    # At each length closed loops of 2 sequences, 12 requests each: the fixed concurrency, then each baseline's
    # (max-model-len, prompt + max_tokens). Interrupted in the first length's second probe, that length still
    # answers from the one it ran. Scraped every 0.1 s: a probe's sequences stop at EOS within a second or two.
    run = G6Run(["--sim", "--experiment", "kv", "--model", MODEL, "--context-len", "512,1024", "--concurrency", "2",
                 "--speedup", "2", "--scrape-interval", "0.1", "--quiet", "--repeats", "1", "--out", str(tmp_path)])  # fmt: skip
    _, url = _sim_of(run)
    _until("the second probe in flight", lambda: _finished(url) >= 12 + 1 and _running(url) > 0)
    run.send(signal.SIGINT)
    assert run.finish() == 130
    (folder,) = tmp_path.iterdir()
    assert run.lines[-1] == f"g6: interrupted after 1 probe (1 of 2 lengths); partial results in {folder}"
    result = load_result(KvResult, folder)
    assert [(n.context_len, n.measured_max_batch) for n in result.lengths] == [(512, 2)]
    assert [p.role for p in result.probes] == ["search"]
    assert "interrupted (Ctrl-C) after 1 probe" in (folder / "report.md").read_text()


@pytest.mark.realtime
def test_an_interrupted_quant_experiment_reports_the_variant_it_stopped_in(tmp_path):
    from benchmarks.g6.experiments.quant import QuantResult

    run = G6Run(["--sim", "--experiment", "quant", "--variants", "fp8,awq", "--concurrency", "1", "--requests", "3",
                 "--input-len", "32", "--output-len", "256", "--quiet", "--repeats", "1", "--out", str(tmp_path)])  # fmt: skip
    _sim_serving(run, "Qwen/Qwen2.5-1.5B-Instruct-AWQ")
    run.send(signal.SIGINT)
    assert run.finish() == 130
    (folder,) = tmp_path.iterdir()
    assert run.lines[-1] == f"g6: interrupted after 1 of 2 points (2 of 2 variants started); partial results in {folder}"
    fp8, awq = load_result(QuantResult, folder).variants
    assert fp8.error is None and [p.completed for p in fp8.points] == [3]
    assert awq.error == "interrupted before it finished" and not awq.points
    assert "- **awq** did not run: interrupted before it finished" in (folder / "report.md").read_text()


# -- --stack: the config restore ------------------------------------------------------------------


@pytest.fixture(scope="module")
def sim() -> Iterator[str]:
    """The stack's vLLM, as the run reaches it through --target."""
    with SimTarget(gpu="l4", speedup=2.0, seed=1, base=ServerSettings(model=MODEL)).serving(ServerSettings(max_num_seqs=16)) as server:
        yield server.base_url


OUTPUTS = program_outputs(
    "g6",
    endpoints={"vllm": {"namespace": "llm", "service": "vllm", "port": 8000}},
    benchmark={"model": MODEL, "max_num_seqs": 16, "gpu": "l4", "sweep": {"max_num_seqs": [4, 8], "concurrency": [2]}},
)


def _stack_run(tmp_path: Path, monkeypatch, sim: str, **fake) -> tuple[G6Run, Path]:
    """A --stack sweep (max-num-seqs 4 then 8 on a stack that runs 16) against a fake `pulumi`."""
    state = fake_pulumi(tmp_path, monkeypatch, OUTPUTS, config={CONFIG_PATH: "16"}, **fake)
    run = G6Run(["--stack", "g6", "--target", sim, "--requests", "400", "--input-len", "32", "--output-len", "64",
                 "--health-timeout", "30", "--quiet", "--repeats", "1", "--out", str(tmp_path / "out")], env=os.environ.copy())  # fmt: skip
    return run, state


def _point_in_flight(sim: str) -> None:
    _until("a point in flight", lambda: _running(sim) > 0)


def _calls(state: Path) -> list[list[str]]:
    return [c for c in pulumi_calls(state) if c[0] != "stack"]


RESTORE_LINE = r"g6: restoring stack g6's vllm.max_num_seqs 16: config and `pulumi up`, which takes minutes"


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_during_a_point_restores_the_stack_and_streams_the_up(sig, code, tmp_path, monkeypatch, sim):
    run, state = _stack_run(tmp_path, monkeypatch, sim)
    _point_in_flight(sim)
    run.send(sig)
    assert run.finish() == code
    assert _calls(state)[-2:] == [["config", "set", "--path", CONFIG_PATH, "16", "-s", "g6"], UP]
    assert json.loads(state.read_text())["config"] == {CONFIG_PATH: "16"}
    err = run.stderr()
    restore = next(i for i, x in enumerate(run.lines) if re.search(RESTORE_LINE, x))
    # The restore's `pulumi up`, line by line as it ran, then the outcome.
    assert run.lines[restore + 1:restore + 3] == ["  pulumi: Updating (g6)", "  pulumi: Resources:"]
    assert "g6: stack g6 restored" in err and "Traceback" not in err


def test_ctrl_c_during_an_up_cancels_it_then_restores(tmp_path, monkeypatch, sim):
    run, state = _stack_run(tmp_path, monkeypatch, sim, hold_ups=(1,))
    run.wait_line(r"pulumi: +~  kubernetes:apps/v1:Deployment vllm updating")
    run.send(signal.SIGINT)
    assert run.finish() == 130
    # pulumi was asked to cancel as its own Ctrl-C does, waited for, and only then the restore ran.
    assert _calls(state) == [
        ["config", "get", "--path", CONFIG_PATH, "-s", "g6"],
        ["config", "set", "--path", CONFIG_PATH, "4", "-s", "g6"],
        UP,
        ["signal", "SIGINT", 1],
        ["config", "set", "--path", CONFIG_PATH, "16", "-s", "g6"],
        UP,
    ]
    assert json.loads(state.read_text())["config"] == {CONFIG_PATH: "16"}
    assert any("pulumi up: cancelling" in x for x in run.lines)
    assert run.lines[-1] == "g6: interrupted (Ctrl-C) before any point was measured"


def test_a_second_ctrl_c_and_a_sigterm_do_not_stop_the_restore(tmp_path, monkeypatch, sim):
    run, state = _stack_run(tmp_path, monkeypatch, sim, hold_ups=(2,))
    _point_in_flight(sim)
    run.send(signal.SIGINT)
    run.wait_line(RESTORE_LINE)
    _until("the restore's up running", lambda: len([x for x in run.lines if x == "  pulumi: Updating (g6)"]) == 2)
    run.send(signal.SIGINT)
    run.wait_line(r"g6: SIGINT received; the restore goes on")
    run.send(signal.SIGTERM)
    run.wait_line(r"g6: SIGTERM received; the restore goes on")
    assert run.proc.poll() is None
    release_path(state, 2).touch()
    assert run.finish() == 130
    # Neither signal reached the restore's pulumi: it ran to the end.
    assert not [c for c in _calls(state) if c[0] == "signal"]
    assert json.loads(state.read_text())["config"] == {CONFIG_PATH: "16"}
    assert "g6: stack g6 restored" in run.stderr()


def test_a_restore_that_fails_names_the_command_that_finishes_it(tmp_path, monkeypatch, sim):
    run, state = _stack_run(tmp_path, monkeypatch, sim, fail_up_if={CONFIG_PATH: "16"})
    _point_in_flight(sim)
    run.send(signal.SIGINT)
    assert run.finish() == 2
    assert run.lines[-1].startswith("g6: stack g6's config was not restored (`pulumi up --yes --skip-preview -s g6` "
                                    "failed (exit 1): Updating (g6) / error: update failed); finish it with: ")  # fmt: skip
    assert run.lines[-1].endswith(": pulumi config set --path vllm.max_num_seqs 16 -s g6 && pulumi up -s g6 --yes")
    assert json.loads(state.read_text())["config"] == {CONFIG_PATH: "16"}  # set, not yet applied
