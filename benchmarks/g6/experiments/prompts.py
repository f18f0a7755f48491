"""The project's own prompt set for quality scoring: no data set to download, fixed text, seeded choice.

Plain completion prompts (no chat template), each ending without trailing whitespace so the
continuation's first token is never merged with the prompt's last one by the tokenizer. The set
mixes the lab's own subject with everyday, historical, scientific and practical text, so a
quantized variant is compared on more than one kind of writing.
"""

from __future__ import annotations

import random

PROMPTS: tuple[str, ...] = (
    # Serving and platforms
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
    "An operating system schedules processes so that",
    "A good unit test checks",
    "The first step in debugging a program that crashes is",
    "A load balancer in front of several web servers",
    "Before a database migration runs in production, an engineer should",
    "A cache in front of a slow service helps only when",
    "The reason a program leaks memory is usually that",
    "Version control lets a team of programmers",
    "A checkpoint written every hour means that a crashed training run",
    "Encrypting data at rest protects against",
    # Science and mathematics
    "Photosynthesis converts sunlight into chemical energy by",
    "The Pythagorean theorem states that",
    "Rivers carve valleys over thousands of years by",
    "The water cycle begins when",
    "The moon causes the tides on Earth because",
    "Compound interest makes savings grow faster because",
    "A vaccine trains the immune system to",
    "Earthquakes happen where tectonic plates",
    "The speed of sound in air depends on",
    "A prime number is a whole number that",
    "Bees are important to farmers because",
    "The boiling point of water drops at high altitude because",
    "Stars shine because in their cores",
    "A thermometer works by",
    "The probability of rolling two sixes with two dice is",
    "Plants grow toward a window because",
    "The human heart pumps blood through",
    "Iron rusts when it is left outside because",
    "A rainbow appears after rain when",
    "The difference between weather and climate is that",
    # History and society
    "The main causes of the French Revolution were",
    "The history of the printing press shows that",
    "A lighthouse keeper in the nineteenth century spent the night",
    "The Silk Road connected",
    "The first railways changed the towns they reached by",
    "Ancient Egyptians built the pyramids using",
    "The invention of the telephone meant that",
    "During the Industrial Revolution, workers in the cities",
    "The Roman aqueducts carried water by",
    "A public library in a small town offers",
    "Elections in a parliamentary democracy decide",
    "The first people to cross the Atlantic by air",
    "Medieval castles were built on hills because",
    "A newspaper in the eighteenth century",
    "The spread of the bicycle in the 1890s gave ordinary people",
    # Everyday life and practical writing
    "The recipe for a simple tomato soup starts with",
    "To write a clear email to a colleague, you should",
    "A good way to learn a new language as an adult is",
    "When planning a long hike in the mountains, remember to",
    "The best way to keep bread fresh for several days is",
    "To change a flat tyre on a bicycle, first",
    "A small garden on a balcony needs",
    "Before buying a used car, it is worth checking",
    "A healthy breakfast usually includes",
    "The rules of chess say that a pawn",
    "To make a room feel larger, interior designers",
    "When a child asks why the sky is blue, a parent can explain that",
    "A good night's sleep depends on",
    "The easiest houseplants to keep alive are",
    "To save money on electricity in winter, a household can",
    # Stories and descriptions
    "The old fisherman looked at the sky and decided",
    "On the morning of the festival, the village square",
    "The letter had been hidden inside the book for forty years, and",
    "When the train stopped in the middle of the snowy plain,",
    "The robot opened the door of the abandoned factory and",
    "At the edge of the desert, the travellers found",
    "The museum guard noticed that one of the paintings",
    "Every summer, the family drove to the lake house where",
    "The young doctor arrived in the mountain village and",
    "Under the bridge, the river was quiet except for",
    # Explanations and arguments
    "The main argument for public transport in large cities is",
    "Learning to play a musical instrument helps children because",
    "A budget is useful even for people who earn little because",
    "The reason most new restaurants close within a few years is",
    "Recycling plastic is harder than recycling glass because",
    "Remote work changed office buildings in that",
    "A referee in football has to decide",
    "The price of coffee depends on",
    "Cities plant trees along streets because",
    "The difference between a virus and a bacterium is that",
    "Good maps are hard to draw because",
    "Solar panels produce less electricity in winter because",
    "An orchestra needs a conductor because",
    "A word that has two opposite meanings is",
    "Translating poetry is difficult because",
    "The first thing to do after a minor kitchen burn is",
)


def select(count: int, seed: int) -> list[str]:
    """`count` prompts in a seeded order; a ValueError when the set has fewer."""
    if not 1 <= count <= len(PROMPTS):
        raise ValueError(f"the project's prompt set has {len(PROMPTS)} prompts; asked for {count}")
    order = list(PROMPTS)
    random.Random(seed).shuffle(order)
    return order[:count]
