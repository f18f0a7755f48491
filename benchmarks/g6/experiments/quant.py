"""`--experiment quant --variants bf16,fp8,awq,...`: what quantization buys (memory, KV tokens,
throughput) and costs (quality), variant by variant on the same server.

Each variant is a server setting, put in place as the sweep puts max-num-seqs (the simulator started
with it, or a stack's `vllm.model` / `vllm.quantization` set and `pulumi up`, restored after):
  bf16        the checkpoint as published (its own dtype)
  fp8         the same checkpoint with `--quantization fp8`: weights cast to fp8 at load (W8A8 on Ada)
  awq         the publisher's AWQ int4 checkpoint (`<model>-AWQ`; vLLM picks its awq_marlin kernel)
  gptq-int8   the publisher's GPTQ int8 checkpoint (`<model>-GPTQ-Int8`; gptq_marlin)
  gptq-int4   the publisher's GPTQ int4 checkpoint (`<model>-GPTQ-Int4`; gptq_marlin)
The first variant listed is the baseline quality is measured against (quality.py: KL over vLLM's
top-20 log-probabilities on the baseline's samples, with intervals and the baseline's own noise floor),
and each variant's weight kernel is read from the server's start-up log (kernels.py). A variant the sizing says
vLLM would refuse, one whose checkpoint the catalogue does not know, or one whose server does not
come up is reported as failed with the reason; the others still run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from benchmarks.g6.analysis import size_for
from benchmarks.g6.config import G6Params
from benchmarks.g6.errors import G6Error
from benchmarks.g6.experiments.divergence import QualityScore
from benchmarks.g6.experiments.kernels import NOT_KNOWN_SIM, NOT_READABLE, kernel_from_log
from benchmarks.g6.experiments.prompts import PROMPTS, select
from benchmarks.g6.experiments.quality import Continuation, QualityClient, QualityError, Sample, reference, score_variant
from benchmarks.g6.result import ExperimentResult, Figures, G6Point, GpuPrice, figures
from benchmarks.g6.sweep import (
    Measurement,
    Outcome,
    PointContext,
    Target,
    interruptible,
    kv_cache_config,
    load_spec,
    measure_point,
    point_seed,
)
from benchmarks.g6.targets import ServerSettings
from benchmarks.harness import HarnessError, RunMeta
from benchmarks.harness.server import Server, server_versions
from benchmarks.harness.signals import Interrupted
from benchmarks.loadgen import LoadSpec
from benchmarks.metrics import KvCacheConfig, MetricsError
from facts.catalogue import MODELS, ServingError, get_model
from benchmarks.serving.sizing import Sizing

VariantName = Literal["bf16", "fp8", "awq", "gptq-int8", "gptq-int4"]
# The checkpoint suffix the publisher gives each quantized variant; None: the model itself.
CHECKPOINTS: dict[str, str | None] = {"bf16": None, "fp8": None, "awq": "AWQ", "gptq-int8": "GPTQ-Int8", "gptq-int4": "GPTQ-Int4"}
DEFAULT_VARIANTS = ("bf16", "fp8", "awq", "gptq-int8", "gptq-int4")
DEFAULT_CONCURRENCY = (1, 64)
NOT_MEASURED_SIM = "not measured (simulator)"


class QuantParams(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    variants: list[VariantName] = Field(min_length=1)
    quality_prompts: int = Field(64, ge=1, le=len(PROMPTS), description="prompts of the project's own set")
    quality_tokens: int = Field(128, ge=1, description="most tokens sampled per continuation")


def variant_settings(variant: str, model: str) -> ServerSettings:
    """The server settings of a variant of `model`; G6Error when the checkpoint is unknown."""
    suffix = CHECKPOINTS[variant]
    if suffix is None:
        return ServerSettings(model=model, quantization="fp8" if variant == "fp8" else None)
    checkpoint = f"{model}-{suffix}"
    if checkpoint not in MODELS:
        known = sorted(name for name in MODELS if get_model(name).quantization is not None)
        raise G6Error(
            f"variant {variant}: no {suffix} checkpoint of {model} in the model catalogue (looked for "
            f"{checkpoint}; quantized checkpoints known: {', '.join(known)})"
        )
    return ServerSettings(model=checkpoint, quantization=None)


class QuantFigures(Figures):
    """A variant's point at one concurrency over its repeats."""

    concurrency: int


class VariantResult(BaseModel):
    """One variant: what the sizing predicted, what vLLM allocated, its points and its quality."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    variant: VariantName
    model: str
    quantization: str | None
    error: str | None = Field(None, description="why the variant did not run; None when it did")
    sizing: Sizing | None = None
    cache: KvCacheConfig | None = None
    points: list[G6Point] = []
    across: list[QuantFigures] = []  # each concurrency over its repeats: the report's figures
    kernel: str = Field(NOT_KNOWN_SIM, description="the weight kernel vLLM's start-up log names")
    quality: QualityScore | None = None
    quality_note: str = ""


class QuantResult(ExperimentResult):
    quant: QuantParams
    variants: list[VariantResult]
    reference: list[Continuation] | None = Field(None, description="the baseline's sampled continuations")


@dataclass
class QuantOutcome(Outcome):
    variants: list[VariantResult] = field(default_factory=list)
    reference: list[Sample] | None = None  # the baseline's continuations with its top-k log-probabilities
    planned: int = 0  # points
    planned_variants: int = 0

    @property
    def measured(self) -> int:
        return sum(len(v.points) for v in self.variants)

    def done(self) -> str:
        return f"{self.measured} of {self.planned} points ({len(self.variants)} of {self.planned_variants} variants started)"


def _quality(params: G6Params, quant: QuantParams, server: Server, served: str, ref: list[Sample] | None,
             floor: QualityScore | None) -> tuple[list[Sample] | None, QualityScore | None, str]:  # fmt: skip
    """The baseline's continuations (sampled here when `ref` is None: this is the baseline) and this
    variant's score against them and the `floor`, or why there is none."""
    # Sent from this process the way it reads the server (for a stack, the API server's service proxy),
    # not from the in-cluster Job: a few hundred non-streamed requests whose answer is the
    # log-probabilities, not their timing, so the proxy's extra hop costs nothing it measures; and the
    # scorer keeps its answers here, with no second program shipped into the cluster for them.
    client = QualityClient(server, served, timeout_s=params.timeouts.total_s)
    baseline = ref is None
    try:
        if baseline:
            ref = reference(client, select(quant.quality_prompts, params.seed), quant.quality_tokens, params.seed)
        score = score_variant(client, ref, params.seed, floor)
    except QualityError as exc:
        return ref, None, f"not measured: {exc}"
    # The simulator's log-probabilities are its toy model's, the same for every variant: the pipeline ran,
    # and its figures are not a measurement of anything, so none is stored (null, not a KL of 0).
    if params.target_kind == "sim":
        return ref, None, NOT_MEASURED_SIM
    return ref, score, "the baseline against itself: the noise floor" if baseline else ""


def _kernel(params: G6Params, server: Server) -> str:
    if params.target_kind == "sim":
        return NOT_KNOWN_SIM
    if server.log is None:
        return NOT_READABLE
    try:
        return kernel_from_log(server.log())
    except HarnessError as exc:
        return f"not known: {exc}"


def variant_specs(params: G6Params, base_url: str, served: str, repeat: int) -> list[LoadSpec]:
    """A variant's load points of one repeat: closed loop at each concurrency, against the checkpoint it
    serves. Every variant is sent the same requests (each runs on a server of its own): a paired comparison."""
    return [load_spec(params, base_url, model=served, concurrency=c, seed=point_seed(params.seed, "c", c, "repeat", repeat))
            for c in params.concurrency or DEFAULT_CONCURRENCY]  # fmt: skip


def across(points: list[G6Point]) -> list[QuantFigures]:
    """Each concurrency's figures over its repeats, lowest concurrency first."""
    levels = sorted({p.concurrency for p in points if p.concurrency is not None})
    return [QuantFigures(concurrency=c, **dict(figures([p for p in points if p.concurrency == c]))) for c in levels]


def planned_specs(params: G6Params, quant: QuantParams, base_url: str) -> list[LoadSpec]:
    """Every variant's load points, as --client-manifest shows them (a variant without a known
    checkpoint has none: the run reports it as failed)."""
    specs = []
    for variant in quant.variants:
        try:
            settings = variant_settings(variant, params.model)
        except G6Error:
            continue
        specs += [spec for repeat in range(params.repeats)
                  for spec in variant_specs(params, base_url, settings.model or params.model, repeat)]  # fmt: skip
    return specs


def _setting_text(settings: ServerSettings) -> str:
    return f"{settings.model}" + (f" --quantization {settings.quantization}" if settings.quantization else "")


def run_quant(params: G6Params, quant: QuantParams, target: Target, how: Measurement, outcome: QuantOutcome) -> None:
    """Every variant in turn on one target, into `outcome`. The caller holds `target.session()` (which
    restores the target's original settings at the end) and the runner's context around it."""
    outcome.planned_variants = len(quant.variants)
    outcome.planned = len(quant.variants) * len(params.concurrency or DEFAULT_CONCURRENCY) * params.repeats
    with interruptible(outcome):
        for index, variant in enumerate(quant.variants):
            outcome.variants.append(_variant(params, quant, target, how, outcome, variant, baseline=index == 0))


def _variant(
    params: G6Params, quant: QuantParams, target: Target, how: Measurement, outcome: QuantOutcome, variant: str,
    baseline: bool,
) -> VariantResult:  # fmt: skip
    """One variant: its server put in place, its points, its quality; or why it did not run."""
    mns = params.max_num_seqs[0]
    try:
        settings = variant_settings(variant, params.model)
    except G6Error as exc:
        return VariantResult(variant=variant, model=params.model, quantization=None, error=str(exc))
    served = settings.model or params.model
    try:
        sizing = size_for(params.model_copy(update={"quantization": settings.quantization}), mns, served)
    except ServingError as exc:
        if served in MODELS:  # a refusal, not a model the catalogue lacks: skip the start
            return VariantResult(variant=variant, model=served, quantization=settings.quantization,
                                 error=f"not started: the sizing says {exc}")  # fmt: skip
        sizing = None
    result = VariantResult(variant=variant, model=served, quantization=settings.quantization, sizing=sizing)
    how.progress.log(f"variant {variant}: {_setting_text(settings)}")
    points: list[G6Point] = []
    try:
        with target.serving(settings) as server:
            outcome.server_versions = outcome.server_versions or server_versions(server)
            # Read before any load: the start-up lines are at the head of a log the load grows.
            result = result.model_copy(update={"kernel": _kernel(params, server)})
            try:
                result = result.model_copy(update={"cache": kv_cache_config(server)})
            except MetricsError as exc:
                outcome.errors.append(f"{variant}: vLLM's KV cache configuration: {exc}")
            for repeat in range(params.repeats):
                for spec in variant_specs(params, server.base_url, served, repeat):
                    label = f"{variant} c={spec.concurrency}" + (f" (repeat {repeat + 1} of {params.repeats})"
                                                                 if params.repeats > 1 else "")  # fmt: skip
                    measured = measure_point(params, spec, server, label, PointContext(mns, sizing), how)
                    points.append(measured.point.model_copy(update={"repeat": repeat}))
                    outcome.errors += measured.errors
            if not baseline and outcome.reference is None:
                score, note = None, "not measured: the baseline gave no reference continuations (see its row)"
            else:
                floor = None if baseline else outcome.variants[0].quality
                outcome.reference, score, note = _quality(params, quant, server, served, outcome.reference, floor)
    except (G6Error, HarnessError) as exc:
        # A server that does not come up (a failed `pulumi up`, a simulator that exits).
        return result.model_copy(update={"error": f"did not run: {exc}", "points": points, "across": across(points)})
    except (KeyboardInterrupt, Interrupted):
        outcome.variants.append(result.model_copy(update={"points": points, "across": across(points),
                                                          "error": "interrupted before it finished"}))  # fmt: skip
        raise
    return result.model_copy(update={"points": points, "across": across(points), "quality": score, "quality_note": note})


def quant_result(meta: RunMeta, params: G6Params, quant: QuantParams, outcome: QuantOutcome, price: GpuPrice | None,
                 cost: str | None) -> QuantResult:  # fmt: skip
    return QuantResult(
        meta=meta, params=params, quant=quant, variants=outcome.variants, gpu_price=price, cost=cost,
        reference=None if outcome.reference is None else [s.continuation for s in outcome.reference],
    )  # fmt: skip
