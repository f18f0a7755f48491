"""`make cluster-up` / `make cluster-down`: the local control plane, shaped like a lab's node pools.

    python -m localcluster up --lab g6   # builds or reuses the binaries, starts a supervisor in the
                                         # background, waits until the cluster is ready; the last
                                         # line printed is the kubeconfig's path
    python -m localcluster down          # stops it: every process it started, every port it held
    python -m localcluster serve --lab g6  # the supervisor itself, in the foreground (Ctrl-C stops it)
    python -m localcluster bench --lab g3 --out results --job-seconds 20 -- --work-seconds 20
                                         # the lab's benchmark against a cluster of its own (localcluster.bench)
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from localcluster import bench
from localcluster.build import REPO, BuildError, ensure
from localcluster.controllers import ControllerError, beside, needed
from localcluster.controlplane import ControlPlaneError, ControlPlane
from localcluster.images import ImageError
from localcluster import realnode
from localcluster.realnode import NodeError
from localcluster.nodes import DEFAULT_JOB_S
from stacks.loader import ConfigError
from stacks.stackfile import load_config, stack_names

FOLDER = REPO / ".cache" / "cluster"
NEEDS = ("kube", "kwok")
REAL_NODE_HELP = "the GPU pool's first node a real one (kubelet, containerd, runc): its pods execute"
READY = "ready "  # the supervisor's last word on its status pipe, followed by the kubeconfig path
DOWN_TIMEOUT_S = 30.0


def _record(folder: Path) -> Path:
    return folder / "supervisor.json"


def _running(folder: Path) -> dict | None:
    """The supervisor recorded in the folder's supervisor.json, if its process still lives."""
    try:
        record = json.loads(_record(folder).read_text())
        os.kill(record["pid"], 0)
    except (FileNotFoundError, ProcessLookupError, ValueError, KeyError):
        return None
    return record


def serve(lab: str, folder: Path, status_fd: int | None, real_node: bool = False) -> int:
    """Run the control plane until SIGTERM or Ctrl-C; report progress and readiness on `status_fd`."""
    out = os.fdopen(status_fd, "w", buffering=1) if status_fd is not None else sys.stdout

    def say(line: str) -> None:
        print(line, file=out, flush=True)

    def stop(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGHUP, stop)
    try:
        config = load_config(lab)
        modules = NEEDS + (realnode.BUILD_MODULES if real_node else ()) + tuple(c.module for c in needed(config))
        built = ensure(modules, say=say)
        with ControlPlane(folder, built, config, say=say, real_node=real_node) as cluster, beside(cluster, built, say):
            _record(folder).write_text(json.dumps({"pid": os.getpid(), "lab": lab, "kubeconfig": str(cluster.kubeconfig)}))
            say(f"local cluster for lab {lab} is up: {len(cluster.components)} processes on 127.0.0.1, logs in {cluster.logs}")
            say(f"{READY}{cluster.kubeconfig}")
            if out is not sys.stdout:
                out.close()
            signal.pause() if hasattr(signal, "pause") else time.sleep(10**9)
    except (BuildError, ControlPlaneError, ControllerError, ConfigError, NodeError, ImageError, FileNotFoundError) as e:
        say(f"error: {e}")
        return 1
    except KeyboardInterrupt:
        return 130
    finally:
        _record(folder).unlink(missing_ok=True)
    return 0


def up(lab: str, folder: Path, real_node: bool = False) -> int:
    running = _running(folder)
    if running:
        if running["lab"] != lab:
            print(f"error: a local cluster for lab {running['lab']} is running: `make cluster-down` first", file=sys.stderr)
            return 1
        print(f"a local cluster for lab {lab} is already running (supervisor pid {running['pid']})")
        print(running["kubeconfig"])
        return 0
    folder.mkdir(parents=True, exist_ok=True)
    read_end, write_end = os.pipe()
    log = (folder / "supervisor.log").open("w")
    # Its own session: the supervisor outlives this command and the terminal's Ctrl-C.
    supervisor = subprocess.Popen(
        [sys.executable, "-m", "localcluster", "serve", "--lab", lab, "--folder", str(folder), "--status-fd", str(write_end),
         *(["--real-node"] if real_node else [])],
        cwd=REPO, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
        pass_fds=(write_end,), start_new_session=True,
    )
    os.close(write_end)
    kubeconfig = None
    with os.fdopen(read_end) as status:
        for line in status:
            line = line.rstrip("\n")
            if line.startswith(READY):
                kubeconfig = line[len(READY):]
            else:
                print(line, flush=True)
    if kubeconfig is None:
        supervisor.wait()
        print(f"error: the local cluster did not start (supervisor log: {log.name})", file=sys.stderr)
        return 1
    print(kubeconfig)
    return 0


def down(folder: Path) -> int:
    running = _running(folder)
    if not running:
        print("no local cluster is running")
        return 0
    os.kill(running["pid"], signal.SIGTERM)
    deadline = time.monotonic() + DOWN_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            os.kill(running["pid"], 0)
        except ProcessLookupError:
            print(f"stopped the local cluster for lab {running['lab']}")
            return 0
        time.sleep(0.2)
    print(f"error: the supervisor (pid {running['pid']}) did not stop within {DOWN_TIMEOUT_S:.0f} s", file=sys.stderr)
    return 1


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # What follows `--` goes to the benchmark unread (`bench`).
    argv, benchmark_args = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    parser = argparse.ArgumentParser(prog="python -m localcluster", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("up", "serve", "down"):
        command = commands.add_parser(name)
        if name != "down":
            command.add_argument("--lab", default="dev", choices=stack_names(), help="shape the nodes like this lab's pools")
        command.add_argument("--folder", type=Path, default=FOLDER, help="where the cluster keeps its files (default .cache/cluster)")
        if name != "down":
            command.add_argument("--real-node", action="store_true",
                                 help=REAL_NODE_HELP)
    commands.choices["serve"].add_argument("--status-fd", type=int, help=argparse.SUPPRESS)
    bench_command = commands.add_parser("bench", help="a lab's benchmark, unchanged, against a local cluster of its own")
    bench_command.add_argument("--lab", required=True, choices=stack_names())
    bench_command.add_argument("--out", type=Path, default=Path("results"), help="the benchmark's --out (default results)")
    bench_command.add_argument("--real-node", action="store_true",
                               help=REAL_NODE_HELP)
    bench_command.add_argument("--job-seconds", type=float, default=DEFAULT_JOB_S,
                               help="how long kwok lets a Job's pod run before it Succeeds (default %(default)s)")  # fmt: skip
    bench_command.add_argument("--set", action="append", default=[], metavar="KEY[.FIELD]=VALUE",
                               help="a config key over the stack file's, as `pulumi config set [--path]` sets it "
                               "(repeatable; VALUE is YAML: 2, true)")  # fmt: skip
    bench_command.add_argument("--whole-gpu-pool", action="store_true", help="with --real-node: the real node holds "
                               "every GPU the pool could (gpu_max_nodes x per node), kwok plays no GPU node")  # fmt: skip
    bench_command.add_argument("--client-on-host", metavar="ENDPOINT", help="the benchmark on this host, through the "
                               "Service of the lab's endpoint ENDPOINT (its ClusterIP, routed to the real node) and "
                               "the node's Prometheus, instead of a Job on kwok's system nodes (g6's default with --real-node)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.command == "bench":
        if (args.whole_gpu_pool or args.client_on_host) and not args.real_node:
            parser.error("--whole-gpu-pool and --client-on-host need --real-node")
        try:
            client = args.client_on_host or (bench.LOAD_FROM_HOST.get(args.lab) if args.real_node else None)
            local = bench.LocalRun(bench.settings(args.set), args.whole_gpu_pool, client)
        except bench.BenchError as e:
            parser.error(str(e))
        return bench.main(args.lab, args.out, args.job_seconds, benchmark_args, args.real_node, local)
    if benchmark_args:
        parser.error(f"options after -- are the benchmark's: only `bench` takes them, not {args.command}")
    folder = args.folder.resolve()
    if args.command == "up":
        return up(args.lab, folder, args.real_node)
    if args.command == "serve":
        return serve(args.lab, folder, args.status_fd, args.real_node)
    return down(folder)


if __name__ == "__main__":
    sys.exit(main())
