"""How far a variant's next-token distributions are from the baseline's, and how sure the figure is.

At every position of a continuation sampled from the baseline, both servers list their top-k
log-probabilities (the position's own token included). KL(baseline || variant) is taken over the
tokens both lists hold plus one bucket for the rest of the vocabulary, whose probability each
distribution gives as 1 minus what it listed there: a partition of the vocabulary, so by the data
processing inequality the figure is a lower bound of the full KL, and exact where both lists hold
every token with mass. Averaged over positions sampled from the baseline it estimates KL(p || q);
scoring the baseline's greedy text would not (FACTS: llama.cpp's KLD convention).

Prompts are the independent units (positions within one continuation are not), so every interval
is a bootstrap over prompts: resample prompts with replacement, recompute the per-position ratio.
A variant is compared with the noise floor (the baseline scored against itself) prompt by prompt:
its excess over the floor is resolved when the paired interval lies wholly above zero.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict

RESAMPLES = 2000
# A remainder that rounding left at or below zero (the listed probabilities summing to 1 or a hair
# more) counts as this much probability, so a remainder the other side gives mass to stays finite.
EMPTY_REST = 1e-10

TopK = dict[int, float]  # token id -> log-probability, as one server listed them at one position


@dataclass(frozen=True)
class Position:
    """One continuation position as a server scored it: the token there and what it listed."""

    token: int
    top: TopK  # holds `token`


def kl_listed(p: TopK, q: TopK) -> float:
    """KL(p || q) in nats over the tokens both list, the rest of the vocabulary as one bucket."""
    common = p.keys() & q.keys()
    kl = sum(math.exp(p[t]) * (p[t] - q[t]) for t in common)
    p_rest = 1.0 - sum(math.exp(p[t]) for t in common)
    q_rest = 1.0 - sum(math.exp(q[t]) for t in common)
    if p_rest > EMPTY_REST:
        kl += p_rest * math.log(p_rest / max(q_rest, EMPTY_REST))
    return kl


def _top1(top: TopK) -> int:
    return max(top, key=lambda t: (top[t], -t))


class PromptScore(BaseModel):
    """Sums over one prompt's continuation positions."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    positions: int
    kl: float  # nats
    top1_agree: int  # positions where both servers' most likely token is the same
    logprob_delta: float  # variant minus baseline log-probability of the sampled tokens


def prompt_score(base: Sequence[Position], variant: Sequence[Position]) -> PromptScore:
    """One prompt's sums; `variant` scores the same tokens as `base`, position by position."""
    for b, v in zip(base, variant, strict=True):
        if b.token != v.token:
            raise ValueError(f"positions out of step: token {b.token} against {v.token}")
    return PromptScore(
        positions=len(base),
        kl=sum(kl_listed(b.top, v.top) for b, v in zip(base, variant)),
        top1_agree=sum(_top1(b.top) == _top1(v.top) for b, v in zip(base, variant)),
        logprob_delta=sum(v.top[v.token] - b.top[b.token] for b, v in zip(base, variant)),
    )


class Estimate(BaseModel):
    """A per-position mean and its bootstrap 95% interval over prompts."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    value: float
    ci95: tuple[float, float]


class FloorComparison(BaseModel):
    """A variant against the noise floor, paired prompt by prompt."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kl_excess: Estimate  # the variant's KL minus the floor's, nats per position
    top1_drop: Estimate  # the floor's top-1 agreement minus the variant's
    kl_resolved: bool  # kl_excess's interval lies above zero
    top1_resolved: bool  # top1_drop's interval lies above zero


class QualityScore(BaseModel):
    """A variant against the baseline's sampled continuations."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    prompts: int
    positions: int
    kl: Estimate  # mean KL(baseline || variant) per position, nats
    top1_agreement: Estimate  # share of positions where both would pick the same greedy token
    logprob_delta: Estimate  # per sampled token; exp(-value) is the perplexity ratio on the baseline's text
    per_prompt: list[PromptScore]
    floor: FloorComparison | None = None  # None: this is the floor (the baseline), or there is none


def _draws(prompts: int, seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(prompts) for _ in range(prompts)] for _ in range(RESAMPLES)]


def _estimate(num: Sequence[float], den: Sequence[int], draws: list[list[int]]) -> Estimate:
    """sum(num) / sum(den), and the 2.5th and 97.5th percentiles of the same ratio over the resamples."""
    stats = sorted(sum(num[i] for i in d) / (sum(den[i] for i in d) or 1) for d in draws)
    lo, hi = stats[round(0.025 * (len(stats) - 1))], stats[round(0.975 * (len(stats) - 1))]
    return Estimate(value=sum(num) / sum(den), ci95=(lo, hi))


def score(per_prompt: Sequence[PromptScore], seed: int, floor: QualityScore | None = None) -> QualityScore:
    """The variant's means with their intervals and, given the floor's per-prompt sums over the same
    continuations, the paired comparison with it. ValueError when no position was scored."""
    den = [p.positions for p in per_prompt]
    if not sum(den):
        raise ValueError("every baseline continuation is empty: nothing to score")
    draws = _draws(len(per_prompt), seed)
    comparison = None
    if floor is not None:
        if [p.positions for p in floor.per_prompt] != den:
            raise ValueError("the floor was scored on other continuations")
        excess = _estimate([v.kl - f.kl for v, f in zip(per_prompt, floor.per_prompt)], den, draws)
        drop = _estimate([f.top1_agree - v.top1_agree for v, f in zip(per_prompt, floor.per_prompt)], den, draws)
        comparison = FloorComparison(kl_excess=excess, top1_drop=drop, kl_resolved=excess.ci95[0] > 0,
                                     top1_resolved=drop.ci95[0] > 0)  # fmt: skip
    return QualityScore(
        prompts=len(per_prompt),
        positions=sum(den),
        kl=_estimate([p.kl for p in per_prompt], den, draws),
        top1_agreement=_estimate([p.top1_agree for p in per_prompt], den, draws),
        logprob_delta=_estimate([p.logprob_delta for p in per_prompt], den, draws),
        per_prompt=list(per_prompt),
        floor=comparison,
    )
