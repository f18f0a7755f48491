"""In-cluster HTTP client of the g5/g7 benchmarks: sends COUNT POSTs, one at a time, and prints one JSON
line per request with the client's own clock (parsed by benchmarks.labs.serving.parse_client_log).

It runs inside the cluster because a port-forward is one tunnel that would shape the numbers.
Environment: TARGET (http://host:port of the gateway), HOST (Host header: the Knative route), PATH_
(request path), BODY (JSON text), COUNT, TIMEOUT_S.
Line: {"i": n, "t_send": epoch, "t_first_byte": epoch|null, "t_done": epoch|null, "status": int|null,
       "error": str|null, "headers": {...}, "body": "first 300 characters"}
"""

import http.client
import json
import os
import time
import urllib.parse

target = urllib.parse.urlsplit(os.environ["TARGET"])
host_header = os.environ.get("HOST") or target.netloc
path, body = os.environ["PATH_"], os.environ["BODY"].encode()
count, timeout = int(os.environ.get("COUNT", "1")), float(os.environ.get("TIMEOUT_S", "1200"))

for i in range(count):
    line = {"i": i, "t_send": time.time(), "t_first_byte": None, "t_done": None, "status": None, "error": None,
            "headers": {}, "body": ""}
    try:
        conn = http.client.HTTPConnection(target.hostname, target.port or 80, timeout=timeout)
        conn.request("POST", path, body=body, headers={"Host": host_header, "Content-Type": "application/json"})
        response = conn.getresponse()  # returns once the status line and headers arrived: the first byte
        line["t_first_byte"] = time.time()
        data = response.read()
        line["t_done"] = time.time()
        line["status"] = response.status
        line["headers"] = {k.lower(): v for k, v in response.getheaders()}
        line["body"] = data[:300].decode(errors="replace")
        conn.close()
    except Exception as e:  # counted apart by the benchmark, never fatal to the loop
        line["error"] = f"{type(e).__name__}: {e}"
    print(json.dumps(line), flush=True)
