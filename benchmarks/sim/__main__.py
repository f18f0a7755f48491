"""`python -m benchmarks.sim`: serve a simulated vLLM engine, or answer a load point with --virtual (cli.py)."""

import sys

from benchmarks.sim.cli import main

if __name__ == "__main__":
    sys.exit(main())
