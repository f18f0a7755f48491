"""g2 worker: a fixed GPU workload, timed. Each iteration is REPEAT fp16 matmuls of SIZE x SIZE,
synchronised, so its wall time grows when other pods share the GPU by time-slicing.
Lines printed (parsed by benchmarks.labs.g2.parse_iterations):
    ready t=EPOCH
    iter I t=EPOCH ms=MILLISECONDS
Environment: SIZE, REPEAT, DURATION_S.
"""

import os
import time

import torch

size, repeat = int(os.environ.get("SIZE", "4096")), int(os.environ.get("REPEAT", "100"))
duration = float(os.environ["DURATION_S"])
a = torch.randn(size, size, device="cuda", dtype=torch.float16)
b = torch.randn(size, size, device="cuda", dtype=torch.float16)
for _ in range(3):  # warm-up: kernels chosen, clocks up
    a @ b
torch.cuda.synchronize()
print(f"ready t={time.time():.3f}", flush=True)
end, i = time.time() + duration, 0
while time.time() < end:
    began = time.perf_counter()
    for _ in range(repeat):
        c = a @ b
    torch.cuda.synchronize()
    print(f"iter {i} t={time.time():.3f} ms={(time.perf_counter() - began) * 1000:.3f}", flush=True)
    i += 1
