"""The simulator's stand-in for a language model, so the quant experiment's quality pipeline (sampled
continuations, top-k log-probabilities, prompt_logprobs) runs end to end offline.

A bigram over VOCAB word tokens " w<id>": the next token's distribution depends only on the previous
token, a fixed function of its id (the same in every simulator, whatever its settings: every
simulated variant is the same model, so a quality comparison between them says nothing about a real
server and the report never presents one as measured). Each previous token has CANDIDATES likely
successors holding LISTED_MASS of probability, geometrically decaying; the rest of the vocabulary
shares what is left evenly, below the least likely candidate.
"""

from __future__ import annotations

import math
import random
import zlib
from functools import lru_cache

VOCAB = 997
CANDIDATES = 40
LISTED_MASS = 0.9
DECAY = 0.15


def token_id(word: str) -> int:
    """A prompt word's token id."""
    return zlib.crc32(word.encode()) % VOCAB


def text(token: int) -> str:
    return f" w{token}"


@lru_cache(maxsize=VOCAB)
def successors(prev: int) -> tuple[tuple[int, float], ...]:
    """(token id, log-probability) of the candidates after `prev`, most likely first."""
    ids = random.Random(f"toymodel:{prev}").sample(range(VOCAB), CANDIDATES)
    weights = [math.exp(-DECAY * rank) for rank in range(CANDIDATES)]
    total = sum(weights)
    return tuple((t, math.log(LISTED_MASS * w / total)) for t, w in zip(ids, weights))


REST_LOGPROB = math.log((1 - LISTED_MASS) / (VOCAB - CANDIDATES))


def logprob(prev: int, token: int) -> tuple[float, int]:
    """log P(token | prev) and its rank (1: the most likely; the unlisted share one rank)."""
    for rank, (t, lp) in enumerate(successors(prev), start=1):
        if t == token:
            return lp, rank
    return REST_LOGPROB, CANDIDATES + 1


def top(prev: int, k: int) -> dict[int, float]:
    return dict(successors(prev)[:k])


def continue_from(prev: int, count: int, rng: random.Random | None) -> list[int]:
    """`count` tokens after `prev`: sampled at temperature 1 with `rng`, greedy without one."""
    out = []
    for _ in range(count):
        cands = successors(prev)
        if rng is None:
            prev = cands[0][0]
        else:
            u, acc = rng.random(), 0.0
            for t, lp in cands:
                acc += math.exp(lp)
                if u < acc:
                    prev = t
                    break
            else:
                listed = {t for t, _ in cands}
                prev = rng.choice([t for t in range(VOCAB) if t not in listed])
        out.append(prev)
    return out
