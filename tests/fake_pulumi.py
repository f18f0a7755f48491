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
    tmp_path: Path, monkeypatch, outputs: dict, config: dict | None = None, fail_up_if: dict | None = None
) -> Path:
    """A `pulumi` on PATH that records its argv, keeps config in a file and prints `outputs`;
    `up` fails while the config holds every key/value of `fail_up_if`."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    state = tmp_path / "pulumi-state.json"
    state.write_text(json.dumps({"outputs": outputs, "config": config or {}, "fail_up_if": fail_up_if}))
    script = bin_dir / "pulumi"
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, sys\n"
        f"state_path = {str(state)!r}\n"
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
        "elif args[0] == 'up':\n"
        "    fail = state['fail_up_if']\n"
        "    if fail and all(cfg.get(k) == v for k, v in fail.items()):\n"
        "        sys.exit('error: update failed')\n"
        "json.dump(state, open(state_path, 'w'))\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return state


def pulumi_calls(state: Path) -> list[list[str]]:
    log = Path(str(state) + ".log")
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
