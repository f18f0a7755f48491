"""g8 trainer: a tiny model trained step by step on the GPU, checkpointed to GCS when asked.

Checkpoints go through the GCS JSON API with the pod's Workload Identity token from the metadata
server (no keys, no extra packages); with STORAGE_EMULATOR_HOST set, to that emulator unauthenticated,
as Google's client libraries do (a cluster without Cloud Storage). Lines printed (parsed by benchmarks.labs.g8.parse_progress):
    starting from step 0 | resumed from step M
    step N t=EPOCH_SECONDS
    checkpoint step N [sigterm]
    done step N
On SIGTERM (spot preemption gives ~30 s of graceful node shutdown) it checkpoints and exits.
Environment: BUCKET, PREFIX, CHECKPOINT (1/0), STEPS, STEP_SECONDS, CHECKPOINT_EVERY[, STORAGE_EMULATOR_HOST].
"""

import io
import json
import os
import signal
import time
import urllib.error
import urllib.parse
import urllib.request

import torch

BUCKET, PREFIX = os.environ["BUCKET"], os.environ["PREFIX"]
CHECKPOINT = os.environ.get("CHECKPOINT", "1") == "1"
STEPS, STEP_SECONDS = int(os.environ["STEPS"]), float(os.environ["STEP_SECONDS"])
EVERY = int(os.environ["CHECKPOINT_EVERY"])
OBJECT = f"{PREFIX}checkpoint.pt"
TOKEN_URL = "http://metadata.google.internal/computeMetadata/v1/instance/service-accounts/default/token"
EMULATOR = os.environ.get("STORAGE_EMULATOR_HOST", "").rstrip("/")
if EMULATOR and "://" not in EMULATOR:
    EMULATOR = f"http://{EMULATOR}"  # host:port, as the Go and Python clients accept it
API = EMULATOR or "https://storage.googleapis.com"


def auth() -> dict:
    if EMULATOR:
        return {}
    req = urllib.request.Request(TOKEN_URL, headers={"Metadata-Flavor": "Google"})
    return {"Authorization": "Bearer " + json.load(urllib.request.urlopen(req, timeout=10))["access_token"]}


def download() -> bytes | None:
    name = urllib.parse.quote(OBJECT, safe="")
    req = urllib.request.Request(f"{API}/storage/v1/b/{BUCKET}/o/{name}?alt=media", headers=auth())
    try:
        return urllib.request.urlopen(req, timeout=60).read()
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return None
        raise


def upload(data: bytes) -> None:
    query = urllib.parse.urlencode({"uploadType": "media", "name": OBJECT})
    req = urllib.request.Request(f"{API}/upload/storage/v1/b/{BUCKET}/o?{query}", data=data, method="POST",
                                 headers={**auth(), "Content-Type": "application/octet-stream"})
    urllib.request.urlopen(req, timeout=60).read()


stopping = False


def on_sigterm(signum, frame):
    global stopping
    stopping = True


signal.signal(signal.SIGTERM, on_sigterm)


def save(step: int, why: str = "") -> None:
    buf = io.BytesIO()
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step}, buf)
    upload(buf.getvalue())
    print(f"checkpoint step {step}{why}", flush=True)


device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
model = torch.nn.Linear(1024, 1024).to(device)
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
start = 0
saved = download() if CHECKPOINT else None
if saved is not None:
    state = torch.load(io.BytesIO(saved), map_location=device)
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    start = state["step"] + 1
    print(f"resumed from step {state['step']}", flush=True)
else:
    print("starting from step 0", flush=True)

for step in range(start, STEPS):
    began = time.time()
    x = torch.randn(256, 1024, device=device)
    loss = (model(x) - x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    time.sleep(max(0.0, STEP_SECONDS - (time.time() - began)))
    print(f"step {step} t={time.time():.3f}", flush=True)
    if CHECKPOINT and stopping:
        save(step, " sigterm")
    elif CHECKPOINT and (step + 1) % EVERY == 0:
        save(step)
    if stopping:
        raise SystemExit(143)
print(f"done step {STEPS - 1}", flush=True)
