"""The criteria of a claim (:class:`nearid_lib.claims.ClaimSpec`): what a quantity, or two on the
same units, must satisfy, and the verdict an interval gives (``holds`` / ``does not hold`` /
``inconclusive``); a :class:`Precondition` makes a claim testable in a profile at all, and
:func:`criterion_from_text` rebuilds a criterion from the text a claims table keeps.

Each criterion's ``p_hold(dist)`` is the bootstrap p-value of "holds": the share of the statistic's
replicates outside the region where the claim holds (for :class:`Within`, the larger of its two
sides: two one-sided tests). "holds" at a 95% two-sided interval is ``p_hold <= 0.025``, so these
are the p-values a multiple-test correction over the counted claims reads."""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

__all__ = ["AtLeast", "AtMost", "Greater", "Within", "RatioAtLeast", "Precondition", "criterion_from_text",
           "share_outside", "edges"]


def share_outside(dist, below: float | None = None, above: float | None = None, strict: bool = False) -> float:
    """The share of the finite replicates of ``dist`` below ``below`` (or at it, ``strict``) or above
    ``above``: the bootstrap p-value of a one-sided criterion."""
    d = np.asarray(dist, dtype=float)
    d = d[np.isfinite(d)]
    if not len(d):
        return float("nan")
    if below is not None:
        return float(np.mean(d <= below if strict else d < below))
    return float(np.mean(d > above))


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

    def p_hold(self, dist) -> float:
        return share_outside(dist, below=self.threshold)


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

    def p_hold(self, dist) -> float:
        return share_outside(dist, above=self.threshold)


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

    def p_hold(self, dist) -> float:
        return share_outside(dist, below=self.margin, strict=True)


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

    def p_hold(self, dist) -> float:
        return max(share_outside(dist, below=-self.tol), share_outside(dist, above=self.tol))


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

    def p_hold(self, dist) -> float:
        return share_outside(dist, below=self.ratio)


@dataclass(frozen=True)
class Precondition:
    """A point-estimate condition that makes a claim testable in a profile (``op``: ">=" | "<=")."""
    q: str
    op: str
    threshold: float
    why: str = ""

    def ok(self, value: float) -> bool:
        return value >= self.threshold if self.op == ">=" else value <= self.threshold


_NUM = r"(-?\d+(?:\.\d+)?)(%?)"
# the texts each criterion's ``criterion(fmt)`` writes, most specific first (quantity names have no spaces)
_PATTERNS = (
    (re.compile(rf"^\|(\S+) - (\S+)\| <= {_NUM}$"), lambda a, b, v: Within(a, b, v)),
    (re.compile(rf"^(\S+) / (\S+) >= {_NUM}$"), lambda a, b, v: RatioAtLeast(a, b, v)),
    (re.compile(rf"^(\S+) - (\S+) > {_NUM}$"), lambda a, b, v: Greater(a, b, v)),
    (re.compile(rf"^(\S+) >= {_NUM}$"), lambda a, v: AtLeast(a, v)),
    (re.compile(rf"^(\S+) <= {_NUM}$"), lambda a, v: AtMost(a, v)),
)


def criterion_from_text(text: str) -> AtLeast | AtMost | Greater | Within | RatioAtLeast:
    """The criterion a claims table's ``criterion`` cell states, rebuilt from its text (the inverse
    of each criterion's ``criterion(fmt)``; a percent value is read back as a fraction). Claims
    tables keep the text only, and the report re-decides a verdict with moved interval ends
    (:func:`nearid_lib.claims.report_section.leaning`). The thresholds are printed to 0.1 points or 3
    decimals, so a declared threshold must be round to that precision to come back exactly
    (``tests/test_claims.py`` checks every declared claim). Raises ValueError on any other text."""
    s = " ".join(str(text).split())
    for pat, make in _PATTERNS:
        m = pat.match(s)
        if m:
            *names, num, pct = m.groups()
            return make(*names, float(num) / (100.0 if pct else 1.0))
    raise ValueError(f"criterion_from_text: not a criterion this module writes: {text!r}")


def edges(test) -> tuple[float, ...]:
    """The values where ``test``'s verdict changes, on the scale of its interval: ``-tol`` and
    ``tol`` for :class:`Within`, else its margin, ratio or threshold."""
    if isinstance(test, Within):
        return (-test.tol, test.tol)
    if isinstance(test, Greater):
        return (test.margin,)
    if isinstance(test, RatioAtLeast):
        return (test.ratio,)
    return (test.threshold,)
