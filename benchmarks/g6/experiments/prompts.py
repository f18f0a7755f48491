"""The project's own prompt set for quality scoring: no data set to download, fixed text, seeded choice.

Plain completion prompts (no chat template), each ending without trailing whitespace so the
continuation's first token is never merged with the prompt's last one by the tokenizer.
"""

from __future__ import annotations

import random

PROMPTS: tuple[str, ...] = (
    "A GPU node pool that scales to zero saves money because",
    "The difference between a Kubernetes Deployment and a Job is that",
    "To serve a language model to many users at once, an inference server",
    "The key-value cache of a transformer stores",
    "When a spot virtual machine is preempted, a training job without checkpoints",
    "Time to first token grows under load because",
    "Quantizing the weights of a model from 16 bits to 4 bits means that",
    "A continuous batching scheduler differs from static batching in that",
    "The memory bandwidth of a GPU limits token generation because",
    "In a Kubernetes cluster, a taint on a node",
    "The recipe for a simple tomato soup starts with",
    "The main causes of the French Revolution were",
    "Photosynthesis converts sunlight into chemical energy by",
    "A good unit test checks",
    "The Pythagorean theorem states that",
    "Rivers carve valleys over thousands of years by",
    "The first step in debugging a program that crashes is",
    "Compound interest makes savings grow faster because",
    "A lighthouse keeper in the nineteenth century spent the night",
    "The water cycle begins when",
    "To write a clear email to a colleague, you should",
    "The moon causes the tides on Earth because",
    "An operating system schedules processes so that",
    "The history of the printing press shows that",
)


def select(count: int, seed: int) -> list[str]:
    """`count` prompts in a seeded order (all of them when `count` is larger than the set)."""
    order = list(PROMPTS)
    random.Random(seed).shuffle(order)
    return order[: max(1, min(count, len(order)))]
