"""`vllm serve MODEL [flags]`, as vLLM v0.34.0 takes it, served by the simulated backend: the command of the
local cluster's vLLM stand-in image (localcluster.images), so g6's Deployment runs there unchanged.

The flags g6's manifests pass (components.vllm.server_args) and the other server flags the simulator models
are handed on; `--served-model-name` names the model when the first argument is a weights folder; `--dtype`
is checked and dropped (bfloat16 and float16 are both two bytes a weight to the simulated L4, as `auto` is
for the models it knows). Any other flag is refused in one line, exit status 2: a stand-in that ignored a
flag would serve something other than what the manifest asked for.
"""

from __future__ import annotations

import sys

from benchmarks.errors import BenchmarkError
from benchmarks.sim import cli

# vLLM flag -> handed on to the simulator under the same name.
TAKES_VALUE = ("--max-num-seqs", "--max-model-len", "--gpu-memory-utilization", "--max-num-batched-tokens",
               "--quantization", "--kv-cache-dtype", "--num-gpu-blocks-override", "--seed", "--host", "--port")  # fmt: skip
SWITCHES = ("--enable-prefix-caching", "--disable-prefix-caching")
DTYPES = ("auto", "bfloat16", "float16")
HOST = "0.0.0.0"  # vLLM's default: every address of the pod


class StandInError(BenchmarkError):
    """A command line the stand-in does not model: one line naming the argument."""


def translate(argv: list[str]) -> list[str]:
    """The simulator's command line for a `vllm` one."""
    if not argv or argv[0] != "serve":
        raise StandInError(f"only `vllm serve` is stood in for, not `vllm {' '.join(argv[:1])}`")
    model, served, handed, host = None, None, [], HOST
    args = list(argv[1:])
    while args:
        arg = args.pop(0)
        name, _, value = arg.partition("=")
        if not arg.startswith("-"):
            if model is not None:
                raise StandInError(f"a second model argument {arg!r}")
            model = arg
        elif name in SWITCHES and not value:
            handed.append(name)
        elif name in (*TAKES_VALUE, "--dtype", "--served-model-name"):
            if not value:
                if not args:
                    raise StandInError(f"{name} needs a value")
                value = args.pop(0)
            if name == "--dtype":
                if value not in DTYPES:
                    raise StandInError(f"--dtype={value}: the simulated engine models {', '.join(DTYPES)}")
            elif name == "--served-model-name":
                served = value
            elif name == "--host":
                host = value
            else:
                handed.append(f"{name}={value}")
        else:
            raise StandInError(f"{name}: a vLLM flag the simulated backend does not model")
    if model is None:
        raise StandInError("no model: `vllm serve MODEL`")
    return ["--model", served or model, *handed, f"--host={host}"]


def main(argv: list[str] | None = None) -> int:
    try:
        flags = translate(sys.argv[1:] if argv is None else argv)
    except StandInError as e:
        print(f"error: vllm stand-in: {e}", file=sys.stderr)
        return 2
    print(f"vllm stand-in: python -m benchmarks.sim {' '.join(flags)}", file=sys.stderr, flush=True)
    return cli.main(flags)


if __name__ == "__main__":
    sys.exit(main())
