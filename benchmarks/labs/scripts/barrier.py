"""g3 worker: wait until every worker of its job is present, then hold its GPU a short while; give up
at the rendezvous timeout. Standard library only (the image has no torch: there is no GPU compute).

Worker 0 (the JobSet's coordinator pod) listens; the others connect to it by the DNS name JobSet gives
it (`<jobset>-<replicatedJob>-<job index>-<pod index>.<subdomain>`, through the JobSet's headless
Service), say who they are and wait for "go". Worker 0 says "go" once all WORKERS are connected; if
the timeout passes first it gives up and closes every connection, so the others give up with it.
Each worker's timeout counts from its own arrival; a worker that arrives late but inside the timeout
still gets through.

Every stdout line is one JSON object (read by benchmarks.labs.g3), times in seconds since the epoch:
    {"event": "arrived", "t": T, "worker": I, "workers": W, "host": HOSTNAME, "coordinator": "HOST:PORT"}
    {"event": "released", "t": T, "worker": I, "waited_s": S}            worker 0 adds "peers": [hostnames]
    {"event": "finished", "t": T, "worker": I, "work": "WHAT IT DID"}
    {"event": "gave_up", "t": T, "worker": I, "waited_s": S, "reason": "WHY"}
    {"event": "terminated", "t": T, "worker": I, "signal": N}            SIGTERM (its job was stopped)
Environment: JOB_COMPLETION_INDEX (set by the Job controller of an Indexed Job), WORKERS, COORDINATOR
(worker 0's host), BARRIER_PORT, RENDEZVOUS_TIMEOUT_S, WORK_S.
Exit status: 0 finished, 1 gave up, 128 + signal when terminated.
"""

import json
import os
import signal
import socket
import sys
import time

INDEX = int(os.environ["JOB_COMPLETION_INDEX"])
WORKERS = int(os.environ["WORKERS"])
COORDINATOR = os.environ["COORDINATOR"]
PORT = int(os.environ["BARRIER_PORT"])
TIMEOUT_S = float(os.environ["RENDEZVOUS_TIMEOUT_S"])
WORK_S = float(os.environ["WORK_S"])
RETRY_S = 0.5  # between attempts to reach worker 0 (its DNS record appears once its pod has an IP)


def log(event, **fields):
    print(json.dumps({"event": event, "t": round(time.time(), 3), "worker": INDEX, **fields}), flush=True)


def on_term(signum, frame):
    log("terminated", signal=signum)
    sys.exit(128 + signum)


def read_line(conn, timeout_s):
    """One line from `conn`, '' at EOF; TimeoutError when nothing came within `timeout_s`."""
    conn.settimeout(max(timeout_s, 0.001))
    with conn.makefile("r", encoding="utf-8") as stream:
        return stream.readline().strip()


def coordinate(deadline):
    """Worker 0: accept the others until all are here or the deadline passes.
    (None, peer hostnames) when everyone was released, else (why not, None)."""
    server = socket.create_server(("", PORT))
    peers = {}  # worker index -> (connection, hostname)
    try:
        while len(peers) < WORKERS - 1:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return f"rendezvous timeout {TIMEOUT_S:g} s: {len(peers) + 1} of {WORKERS} workers arrived", None
            server.settimeout(remaining)
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue  # the deadline check above ends it
            try:
                hello = json.loads(read_line(conn, deadline - time.monotonic()) or "{}")
            except (TimeoutError, ValueError, OSError):
                hello = {}
            if "worker" not in hello:
                conn.close()
                continue
            if hello["worker"] in peers:  # the same worker again (it reconnected): keep the new one
                peers[hello["worker"]][0].close()
            peers[hello["worker"]] = (conn, hello.get("host", "?"))
        for conn, _ in peers.values():
            try:
                conn.sendall(b"go\n")
            except OSError:
                pass  # a peer that vanished just now fails its own job; the others are released
        return None, sorted(host for _, host in peers.values())
    finally:
        for conn, _ in peers.values():
            conn.close()
        server.close()


def join(deadline):
    """Any other worker: reach worker 0, say hello, wait for "go". None when released, else why not."""
    last_error = "no attempt"
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return f"rendezvous timeout {TIMEOUT_S:g} s: worker 0 at {COORDINATOR}:{PORT} not reachable ({last_error})"
        try:
            conn = socket.create_connection((COORDINATOR, PORT), timeout=min(remaining, 2.0))
            break
        except OSError as e:  # not resolvable yet, or not listening yet
            last_error = str(e) or type(e).__name__
            time.sleep(min(RETRY_S, max(remaining, 0)))
    with conn:
        conn.sendall((json.dumps({"worker": INDEX, "host": socket.gethostname()}) + "\n").encode())
        try:
            answer = read_line(conn, deadline - time.monotonic())
        except TimeoutError:
            return f"rendezvous timeout {TIMEOUT_S:g} s: worker 0 never said go"
        except OSError as e:
            return f"connection to worker 0 lost ({e})"
    return None if answer == "go" else "worker 0 gave up (it closed the connection)"


def main():
    signal.signal(signal.SIGTERM, on_term)
    log("arrived", workers=WORKERS, host=socket.gethostname(), coordinator=f"{COORDINATOR}:{PORT}")
    began = time.monotonic()
    deadline = began + TIMEOUT_S
    failure, peers = coordinate(deadline) if INDEX == 0 else (join(deadline), None)
    waited = round(time.monotonic() - began, 3)
    if failure:
        log("gave_up", waited_s=waited, reason=failure)
        return 1
    log("released", waited_s=waited, **({"peers": peers} if peers is not None else {}))
    time.sleep(WORK_S)
    log(
        "finished",
        work=f"held its shared GPU {WORK_S:g} s without computing (the image has only Python's standard library)",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
