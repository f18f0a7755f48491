"""Every container image the lab benchmarks run, pinned to a tag here and nowhere else (a tag, not a
digest: components/versions.py says why)."""

# PyTorch with CUDA 12.4 runtime: the L4 (Ada) is supported and GKE's LATEST driver serves CUDA 12.x.
# Used for the GPU workloads (g2 matmul loop, g8 trainer) and the g4 rendezvous (gloo on CPU).
PYTORCH_CUDA = "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime"
# Small image for the workloads that only need a Python interpreter: the g5 HTTP client, the g3
# barrier workers and the g6 load generator (standard library only, run with -I -S). Pinned by tag;
# its digest could not be verified from where this was written (no registry access), so a tag moved
# upstream would not show.
PYTHON = "python:3.12.8-slim"
# The smallest thing that runs: g1's placement probe only needs to exist.
BUSYBOX = "busybox:1.37.0"

ALL = (PYTORCH_CUDA, PYTHON, BUSYBOX)
