"""The g6 command line's value types and parser: a bad value is one line naming the flag, what was
given and what is allowed, never a validation dump after the work has started."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from typing import Any, NoReturn

from benchmarks.loadgen.lengths import lengths_argument as lengths  # noqa: F401 (the g6 flags' type)


class Parser(argparse.ArgumentParser):
    """argparse, with its errors on one line (g6's usage alone spans a screen); `owners` names the experiment
    each experiment's own flag (by destination) belongs to."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.owners: dict[str, str] = {}

    def error(self, message: str) -> NoReturn:
        print(f"g6: {message} (`{self.prog} --help` lists the options)", file=sys.stderr)
        sys.exit(2)


def _refuse(what: str, text: str) -> NoReturn:
    raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")


def whole(least: int) -> Callable[[str], int]:
    """A whole number of at least `least`."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            _refuse(f"a whole number >= {least}", text)
        if value < least:
            _refuse(f"a whole number >= {least}", text)
        return value

    return parse


def wholes(least: int) -> Callable[[str], list[int]]:
    """Comma-separated whole numbers, each at least `least`."""
    one = whole(least)

    def parse(text: str) -> list[int]:
        try:
            values = [one(x) for x in text.split(",") if x.strip()]
        except argparse.ArgumentTypeError:
            values = []
        if not values:
            _refuse(f"comma-separated whole numbers >= {least}", text)
        return values

    return parse


def positive(text: str) -> float:
    """A finite number above zero (inf is no limit and nan no number: both refused)."""
    try:
        value = float(text)
    except ValueError:
        _refuse("a finite number > 0", text)
    if not (value > 0 and math.isfinite(value)):  # NaN fails the first test
        _refuse("a finite number > 0", text)
    return value


def non_negative(text: str) -> float:
    """A finite number, zero or above."""
    try:
        value = float(text)
    except ValueError:
        _refuse("a finite number >= 0", text)
    if not (value >= 0 and math.isfinite(value)):
        _refuse("a finite number >= 0", text)
    return value


def positives(text: str) -> list[float]:
    """Comma-separated numbers, each above zero."""
    try:
        values = [positive(x) for x in text.split(",") if x.strip()]
    except argparse.ArgumentTypeError:
        values = []
    if not values:
        _refuse("comma-separated finite numbers > 0", text)
    return values


def fraction(text: str) -> float:
    """A share of a whole: above zero, at most one."""
    value = positive(text)
    if value > 1:
        _refuse("a fraction > 0 and <= 1", text)
    return value


