"""In-cluster load client of the g5 load phase: one request that wakes the predictor from zero, then an
open-loop request-rate ramp (RATES requests/s, STEP_S seconds each), one JSON line per request.

Open loop: requests go out at their scheduled times whatever the server does, each on a worker thread,
and latency counts from the scheduled time, so a slow server cannot slow the offered load down (no
coordinated omission). The first request waits for its answer before the ramp starts, so the cold start
is measured on its own and the ramp meets a live replica.
Environment: TARGET (http://host:port of the gateway), HOST (Host header: the Knative route), PATH_,
BODY (JSON text), RATES ("1,4,8"), STEP_S, TIMEOUT_S, WORKERS (most requests in flight at once).
Lines: {"event": "ramp", "t0": epoch, "rates": [...], "step_s": s} once the ramp starts;
{"i": n, "step": k (-1: the cold request), "t_sched": epoch, "t_send": epoch, "t_first_byte": epoch|null,
 "t_done": epoch|null, "status": int|null, "error": str|null} per request; {"event": "end", "t": epoch}.
"""

import http.client
import json
import os
import sys
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor

target = urllib.parse.urlsplit(os.environ["TARGET"])
host_header = os.environ.get("HOST") or target.netloc
path, body = os.environ["PATH_"], os.environ["BODY"].encode()
rates = [float(r) for r in os.environ["RATES"].split(",")]
step_s = float(os.environ.get("STEP_S", "60"))
timeout = float(os.environ.get("TIMEOUT_S", "1800"))
workers = int(os.environ.get("WORKERS", "256"))
headers = {"Host": host_header, "Content-Type": "application/json"}
print_lock = threading.Lock()
local = threading.local()


def emit(line):
    with print_lock:
        sys.stdout.write(json.dumps(line, separators=(",", ":")) + "\n")
        sys.stdout.flush()


def connection():
    # One keep-alive connection per worker thread: no TCP handshake in every latency.
    if getattr(local, "conn", None) is None:
        local.conn = http.client.HTTPConnection(target.hostname, target.port or 80, timeout=timeout)
    return local.conn


def send(i, step, t_sched):
    line = {"i": i, "step": step, "t_sched": round(t_sched, 4), "t_send": None, "t_first_byte": None,
            "t_done": None, "status": None, "error": None}
    try:
        line["t_send"] = round(time.time(), 4)
        conn = connection()
        conn.request("POST", path, body=body, headers=headers)
        response = conn.getresponse()  # returns once the status line and headers arrived: the first byte
        line["t_first_byte"] = round(time.time(), 4)
        response.read()
        line["t_done"] = round(time.time(), 4)
        line["status"] = response.status
    except Exception as e:  # counted apart by the benchmark, never fatal to the run
        line["error"] = f"{type(e).__name__}: {e}"
        if getattr(local, "conn", None) is not None:
            local.conn.close()
            local.conn = None
    emit(line)


send(0, -1, time.time())
t0 = time.time()
emit({"event": "ramp", "t0": round(t0, 4), "rates": rates, "step_s": step_s})
i = 1
with ThreadPoolExecutor(max_workers=workers) as pool:
    for step, rate in enumerate(rates):
        start = t0 + step * step_s
        for j in range(int(round(rate * step_s))):
            t_sched = start + j / rate
            delay = t_sched - time.time()
            if delay > 0:
                time.sleep(delay)
            pool.submit(send, i, step, t_sched)
            i += 1
emit({"event": "end", "t": round(time.time(), 4)})
