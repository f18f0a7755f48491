"""Which weight kernel a vLLM server chose, read from its start-up log.

vLLM names the kernel as it builds the quantized layers. The lines looked for, in the source of the
versions this project pins or may move to:
- "The model is convertible to awq_marlin during runtime. Using awq_marlin kernel." (and gptq_marlin):
  `override_quantization_method` in model_executor/layers/quantization/awq_marlin.py and
  gptq_marlin.py, vLLM 0.11.2;
- "Using MarlinLinearKernel for GPTQMarlinLinearMethod" (any `Using <X>Kernel for <method>`): the
  mixed-precision kernel choice in gptq_marlin.py and compressed_tensors' schemes, 0.11.2; 0.33.0 and
  0.34.0 say "Using <X>Kernel for mixed-precision linear" and "Selected <X>Kernel for <module>"
  (model_executor/kernels/linear/__init__.py);
- "... Weight-only FP8 compression will be used leveraging the Marlin kernel ...": fp8 on a GPU
  without native FP8 (utils/marlin_utils_fp8.py); an L4 (Ada) has it.
Where no line names one (fp8 on Ada in 0.11.2 goes to CUTLASS's scaled_mm without saying so), the
engine's configuration line ("Initializing a V1 LLM engine (v...) with config: ... quantization=...")
still says which method ran.
"""

from __future__ import annotations

import re

NOT_KNOWN_SIM = "not known (simulator)"
NOT_READABLE = "not known (this process cannot read the server's log)"

_CONVERTIBLE = re.compile(r"The model is convertible to (\w+) during runtime\. Using \w+ kernel")
_CHOSEN = re.compile(r"(?:Using|Selected) (\w+Kernel\w*) for ([\w .-]+?)\s*$", re.MULTILINE)
_FP8_MARLIN = re.compile(r"Weight-only FP8 compression will be used leveraging the Marlin kernel")
_METHOD = re.compile(r"with config: .*?\bquantization=([\w-]+)")


def kernel_from_log(log: str) -> str:
    """What the log says of the weight kernel, as the report prints it."""
    found: list[str] = []
    for match in _CONVERTIBLE.finditer(log):
        found.append(match.group(1))
    for match in _CHOSEN.finditer(log):
        found.append(f"{match.group(1)} ({match.group(2)})")
    if _FP8_MARLIN.search(log):
        found.append("FP8 Marlin, weight-only")
    if found:
        return ", ".join(dict.fromkeys(found))
    method = _METHOD.search(log)
    if method is None:
        return "not in the server's log (no kernel line, no engine configuration line)"
    if method.group(1) == "None":
        return "unquantized (no quantization method)"
    return f"not named in the log (quantization={method.group(1)})"
