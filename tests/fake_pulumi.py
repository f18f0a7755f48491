"""A fake `pulumi` executable for tests: records its argv, keeps config in a file, prints outputs.

A test seam at the process boundary: the code under test runs the real subprocess calls.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path


def fake_pulumi(
    tmp_path: Path, monkeypatch, outputs: dict, config: dict | None = None, fail_up_if: dict | None = None,
    hold_ups: tuple[int, ...] = (),
) -> Path:
    """A `pulumi` on PATH that records its argv, keeps config in a file and prints `outputs`;
    `up` prints progress lines as pulumi does, and fails while the config holds every key/value of
    `fail_up_if`. The n-th `up` for n in `hold_ups` prints its first lines and waits until the file
    `release_path(state, n)` exists; SIGINT or SIGTERM cancel it (exit 255, as pulumi's first Ctrl-C
    does), and the signal is recorded among the calls as ["signal", NAME, n]. Like the file (diy) backend,
    `up` holds a lock file while it runs, which a SIGKILL leaves behind: a later `up` then fails with
    pulumi's own message until `cancel` deletes it."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    state = tmp_path / "pulumi-state.json"
    state.write_text(json.dumps({"outputs": outputs, "config": config or {}, "fail_up_if": fail_up_if,
                                 "hold_ups": list(hold_ups), "ups": 0}))  # fmt: skip
    script = bin_dir / "pulumi"
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, os, signal, sys, time\n"
        f"state_path = {str(state)!r}\n"
        "lock = state_path + '.lock'  # the diy backend's .pulumi/locks/<org>/<project>/<stack>/<id>.json\n"
        "def save(state):  # whole or not at all, as pulumi keeps its state: a reader never sees half of it\n"
        "    json.dump(state, open(state_path + '.tmp', 'w'))\n"
        "    os.replace(state_path + '.tmp', state_path)\n"
        "state = json.load(open(state_path))\n"
        "args = sys.argv[1:]\n"
        "open(state_path + '.log', 'a').write(json.dumps(args) + '\\n')\n"
        "cfg = state['config']\n"
        "if args[:2] == ['stack', 'output']:\n"
        "    print(json.dumps(state['outputs']))\n"
        "elif args[:2] == ['config', 'get']:\n"
        "    key = args[3]\n"
        "    if key not in cfg: sys.exit('error: configuration key not found')\n"
        "    print(cfg[key])\n"
        "elif args[:2] == ['config', 'set']:\n"
        "    cfg[args[3]] = args[4]\n"
        "elif args[:2] == ['config', 'rm']:\n"
        "    cfg.pop(args[3], None)\n"
        "elif args[0] == 'cancel':\n"
        "    if os.path.exists(lock): os.remove(lock)\n"
        "elif args[0] == 'refresh':\n"
        "    print('Refreshing (' + args[-1] + ')', flush=True)\n"
        "elif args[0] == 'up':\n"
        "    if os.path.exists(lock):\n"
        "        sys.exit('error: the stack is currently locked by 1 lock(s). Either wait for the other process(es) '\n"
        "                 'to end or delete the lock file with `pulumi cancel`.')\n"
        "    open(lock, 'w').write(str(os.getpid()))\n"
        "    n = state['ups'] = state['ups'] + 1\n"
        "    save(state)\n"
        "    def cancel(signum, frame):\n"
        "        open(state_path + '.log', 'a').write(json.dumps(['signal', signal.Signals(signum).name, n]) + '\\n')\n"
        "        print('^C received; cancelling the current operation', flush=True)\n"
        "        os.remove(lock)\n"
        "        os._exit(255)\n"
        "    signal.signal(signal.SIGINT, cancel)\n"
        "    signal.signal(signal.SIGTERM, cancel)\n"
        "    print(f'Updating ({args[-1]})', flush=True)\n"
        "    if n in state['hold_ups']:\n"
        "        print('    ~  kubernetes:apps/v1:Deployment vllm updating', flush=True)\n"
        "        while not os.path.exists(f'{state_path}.release-{n}'):\n"
        "            time.sleep(0.01)\n"
        "    fail = state['fail_up_if']\n"
        "    os.remove(lock)  # released on any exit pulumi itself makes\n"
        "    if fail and all(cfg.get(k) == v for k, v in fail.items()):\n"
        "        sys.exit('error: update failed')\n"
        "    print('Resources:\\n    ~ 1 updated', flush=True)\n"
        "save(state)\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return state


def release_path(state: Path, n: int) -> Path:
    """The file that lets a held n-th `up` go on."""
    return Path(f"{state}.release-{n}")


def pulumi_calls(state: Path) -> list[list[str]]:
    log = Path(str(state) + ".log")
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def pulumi_answering(tmp_path: Path, monkeypatch, answers: dict[str, tuple[str, str, int]]) -> Path:
    """A `pulumi` on PATH answering each command (its first words, e.g. "stack ls" or "destroy") with
    (stdout, stderr, exit status) as the real CLI would; an unknown command fails loudly. Returns the log
    of the argv it was called with, one JSON list a line."""
    bin_dir = tmp_path / "pulumi-bin"
    bin_dir.mkdir()
    log = tmp_path / "pulumi-calls.log"
    script = bin_dir / "pulumi"
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, sys\n"
        f"answers = {answers!r}\n"
        f"open({str(log)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"
        "for command, (out, err, code) in answers.items():\n"
        "    if sys.argv[1:1 + len(command.split())] == command.split():\n"
        "        sys.stdout.write(out); sys.stderr.write(err); sys.exit(code)\n"
        "sys.exit(f'fake pulumi: no answer for {sys.argv[1:]}')\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return log
