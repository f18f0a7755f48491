"""Request lengths: a fixed count or a seeded distribution, drawn once per request before a run.

Text forms (`--input-len`, `--output-len`): `N`, `uniform:LO,HI` (whole numbers, both ends included),
`lognormal:MEAN,SD` (the lengths' own mean and standard deviation, not the underlying normal's),
`file:PATH` (one length per line, sampled with replacement). Draws are clipped to [1, cap]. The
values of a file are read once, where the flag is parsed, so a spec carries them (a pod has no file).
"""

from __future__ import annotations

import argparse
import math
import random
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_serializer, model_validator

from benchmarks.loadgen.errors import LoadgenError

FORMS = "N, uniform:LO,HI, lognormal:MEAN,SD or file:PATH"


class Lengths(BaseModel):
    """How many tokens one side (prompt or output) of each request has."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["fixed", "uniform", "lognormal", "file"] = "fixed"
    a: float = Field(1, ge=1)  # fixed: N; uniform: LO; lognormal: MEAN; file: unused
    b: float = Field(0, ge=0)  # uniform: HI; lognormal: SD
    path: str | None = None
    values: list[int] = []  # file: its lengths

    @model_validator(mode="before")
    @classmethod
    def _from_number_or_text(cls, data: Any) -> Any:
        # A bare number is today's meaning of --input-len/--output-len (and how a fixed length is saved).
        if isinstance(data, int) and not isinstance(data, bool):
            return {"kind": "fixed", "a": data}
        if isinstance(data, str):
            return dict(parse_lengths(data))
        return data

    @model_validator(mode="after")
    def _coherent(self) -> Lengths:
        if self.kind in ("fixed", "uniform") and (self.a != int(self.a) or self.b != int(self.b)):
            raise LoadgenError(f"lengths {self.describe()}: whole numbers expected")
        if self.kind == "uniform" and self.b < self.a:
            raise LoadgenError(f"lengths {self.describe()}: HI must be at least LO")
        if self.kind == "file" and not self.values:
            raise LoadgenError(f"lengths file {self.path}: no lengths in it")
        return self

    @model_serializer(mode="wrap")
    def _saved(self, handler: Any) -> Any:
        # A fixed length is saved as the bare number result.json always held.
        return int(self.a) if self.kind == "fixed" else handler(self)

    @property
    def fixed(self) -> bool:
        return self.kind == "fixed"

    @property
    def mean(self) -> float:
        """The distribution's mean before clipping (what sizing and the report's nominal figure use)."""
        if self.kind == "uniform":
            return (self.a + self.b) / 2
        if self.kind == "file":
            return sum(self.values) / len(self.values)
        return self.a

    @property
    def most(self) -> int | None:
        """The longest length it can draw; None when unbounded (lognormal: clipped at the cap instead)."""
        if self.kind == "lognormal":
            return None
        if self.kind == "file":
            return max(self.values)
        return int(self.b if self.kind == "uniform" else self.a)

    def describe(self) -> str:
        if self.kind == "fixed":
            return f"{int(self.a)}"
        if self.kind == "uniform":
            return f"uniform:{int(self.a)},{int(self.b)}"
        if self.kind == "lognormal":
            return f"lognormal:{self.a:g},{self.b:g}"
        return f"file:{self.path} ({len(self.values)} lengths)"

    def draw(self, rng: random.Random, cap: int | None = None) -> int:
        """One length, clipped to [1, cap]."""
        if self.kind == "uniform":
            n = rng.randint(int(self.a), int(self.b))
        elif self.kind == "lognormal":
            # The underlying normal's parameters from the lengths' mean m and spread s:
            # sigma^2 = ln(1 + s^2/m^2), mu = ln m - sigma^2 / 2.
            sigma2 = math.log1p((self.b / self.a) ** 2)
            n = round(rng.lognormvariate(math.log(self.a) - sigma2 / 2, math.sqrt(sigma2)))
        elif self.kind == "file":
            n = rng.choice(self.values)
        else:
            n = int(self.a)
        return max(1, min(n, cap) if cap is not None else n)


def _numbers(text: str, form: str, count: int) -> list[float]:
    parts = text.split(",")
    try:
        values = [float(x) for x in parts]
    except ValueError:
        values = []
    if len(values) != count or not all(math.isfinite(v) and v > 0 for v in values):
        raise LoadgenError(f"lengths '{form}:{text}': expected {count} positive numbers; allowed forms: {FORMS}")
    return values


def parse_lengths(text: str) -> Lengths:
    """A Lengths from its text form; a LoadgenError naming the forms allowed otherwise."""
    form, sep, rest = text.strip().partition(":")
    if not sep:
        try:
            n = int(form)
        except ValueError:
            n = 0
        if n < 1:
            raise LoadgenError(f"expected a whole number >= 1, uniform:LO,HI, lognormal:MEAN,SD or file:PATH, got {text!r}")
        return Lengths(kind="fixed", a=n)
    if form == "uniform":
        lo, hi = _numbers(rest, form, 2)
        if lo < 1 or lo != int(lo) or hi != int(hi) or hi < lo:
            raise LoadgenError(f"lengths {text!r}: uniform:LO,HI takes whole numbers with 1 <= LO <= HI")
        return Lengths(kind="uniform", a=lo, b=hi)
    if form == "lognormal":
        mean, sd = _numbers(rest, form, 2)
        if mean < 1:
            raise LoadgenError(f"lengths {text!r}: the mean is at least 1")
        return Lengths(kind="lognormal", a=mean, b=sd)
    if form == "file":
        try:
            lines = Path(rest).read_text().split()
        except OSError as exc:
            raise LoadgenError(f"lengths file {rest}: {exc.strerror}") from None
        try:
            values = [int(x) for x in lines]
        except ValueError:
            raise LoadgenError(f"lengths file {rest}: one whole number per line expected") from None
        if any(v < 1 for v in values):
            raise LoadgenError(f"lengths file {rest}: every length is at least 1")
        return Lengths(kind="file", path=rest, values=values)
    raise LoadgenError(f"lengths {text!r}: unknown form {form!r}; allowed forms are {FORMS}")


def lengths_argument(text: str) -> Lengths:
    """`parse_lengths` as an argparse type (--input-len, --output-len): a bad form is argparse's error."""
    try:
        return parse_lengths(text)
    except LoadgenError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def draw_pairs(inputs: Lengths, outputs: Lengths, count: int, seed: int, max_model_len: int | None) -> tuple[list[int], list[int]]:
    """(prompt lengths, output lengths) of `count` requests, seeded: a prompt leaves at least one token
    of the context for output, and the output is clipped to what the prompt leaves."""
    rng = random.Random(f"lengths:{seed}")
    ins, outs = [], []
    for _ in range(count):
        n_in = inputs.draw(rng, None if max_model_len is None else max_model_len - 1)
        n_out = outputs.draw(rng, None if max_model_len is None else max_model_len - n_in)
        ins.append(n_in)
        outs.append(n_out)
    return ins, outs
