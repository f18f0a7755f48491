"""Every container image the lab benchmarks run, pinned to a tag here and nowhere else (a tag, not a
digest: components/versions.py says why)."""

# PyTorch with CUDA 12.4 runtime: the L4 (Ada) is supported and GKE's LATEST driver serves CUDA 12.x.
# Used for the GPU workloads (g2 matmul loop, g8 trainer) and the g4 rendezvous (gloo on CPU).
PYTORCH_CUDA = "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"
# Small image for the workloads that only need a Python interpreter (g5 HTTP client, g3 barrier workers).
PYTHON = "python:3.12.8-slim"
# The smallest thing that runs: g1's placement probe only needs to exist.
BUSYBOX = "busybox:1.37.0"

ALL = (PYTORCH_CUDA, PYTHON, BUSYBOX)
