"""The criteria of a claim (:class:`nearid_lib.claims.ClaimSpec`): what a quantity, or two on the
same units, must satisfy, and the verdict an interval gives (``holds`` / ``does not hold`` /
``inconclusive``); a :class:`Precondition` makes a claim testable in a profile at all."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["AtLeast", "AtMost", "Greater", "Within", "RatioAtLeast", "Precondition"]


@dataclass(frozen=True)
class AtLeast:
    """quantity >= threshold."""
    q: str
    threshold: float

    quantities = property(lambda self: (self.q,))

    def criterion(self, fmt) -> str:
        return f"{self.q} >= {fmt(self.threshold)}"

    def decide(self, est: float, low: float, high: float) -> str:
        return "holds" if low >= self.threshold else "does not hold" if high < self.threshold else "inconclusive"


@dataclass(frozen=True)
class AtMost:
    """quantity <= threshold."""
    q: str
    threshold: float

    quantities = property(lambda self: (self.q,))

    def criterion(self, fmt) -> str:
        return f"{self.q} <= {fmt(self.threshold)}"

    def decide(self, est: float, low: float, high: float) -> str:
        return "holds" if high <= self.threshold else "does not hold" if low > self.threshold else "inconclusive"


@dataclass(frozen=True)
class Greater:
    """a - b > margin (paired when a and b share units)."""
    a: str
    b: str
    margin: float = 0.0

    quantities = property(lambda self: (self.a, self.b))

    def criterion(self, fmt) -> str:
        return f"{self.a} - {self.b} > {fmt(self.margin)}"

    def decide(self, est: float, low: float, high: float) -> str:
        return "holds" if low > self.margin else "does not hold" if high <= self.margin else "inconclusive"


@dataclass(frozen=True)
class Within:
    """|a - b| <= tol."""
    a: str
    b: str
    tol: float

    quantities = property(lambda self: (self.a, self.b))

    def criterion(self, fmt) -> str:
        return f"|{self.a} - {self.b}| <= {fmt(self.tol)}"

    def decide(self, est: float, low: float, high: float) -> str:
        if -self.tol <= low and high <= self.tol:
            return "holds"
        return "does not hold" if low > self.tol or high < -self.tol else "inconclusive"


@dataclass(frozen=True)
class RatioAtLeast:
    """a / b >= ratio (paired when a and b share units), e.g. "reaches 90% of the ceiling"."""
    a: str
    b: str
    ratio: float

    quantities = property(lambda self: (self.a, self.b))
    combined = "ratio"

    @staticmethod
    def combine(a, b):
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.divide(a, b)

    def criterion(self, fmt) -> str:
        return f"{self.a} / {self.b} >= {self.ratio:.2f}"

    def decide(self, est: float, low: float, high: float) -> str:
        return "holds" if low >= self.ratio else "does not hold" if high < self.ratio else "inconclusive"


@dataclass(frozen=True)
class Precondition:
    """A point-estimate condition that makes a claim testable in a profile (``op``: ">=" | "<=")."""
    q: str
    op: str
    threshold: float
    why: str = ""

    def ok(self, value: float) -> bool:
        return value >= self.threshold if self.op == ">=" else value <= self.threshold
