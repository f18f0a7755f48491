"""g4 worker: join the job's process group, all-reduce one number, print the evidence.

MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK come from torchrun (a TrainJob of Kubeflow Trainer v2: it
reads the PET_* variables the torch plugin injects) or from the Training Operator v1; gloo on CPU
tensors works whether or not the pods share one GPU (NCCL refuses two ranks on one device).
Lines printed (parsed by benchmarks.labs.g4.parse_log):
    rendezvous rank=R world_size=W backend=gloo host=H master=ADDR:PORT cuda=True|False
    all_reduce rank=R sum=S expected=E
"""

import os
import socket
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
print(
    f"rendezvous rank={rank} world_size={world} backend={dist.get_backend()} host={socket.gethostname()} "
    f"master={os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')} cuda={torch.cuda.is_available()}",
    flush=True,
)
value = torch.tensor([float(rank + 1)])
dist.all_reduce(value)
print(f"all_reduce rank={rank} sum={value.item():g} expected={world * (world + 1) / 2:g}", flush=True)
dist.barrier()
dist.destroy_process_group()
# Stay up a little so the benchmark reads this log even when cleanPodPolicy deletes finished pods.
time.sleep(float(os.environ.get("LINGER_S", "0")))
