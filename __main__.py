"""Entry point of `pulumi up`: load the lab config, compose the platform, export the outputs."""

import pulumi

from stacks.loader import load
from stacks.program import build

config, secrets = load()
for key, value in build(config, secrets).items():
    pulumi.export(key, value)
