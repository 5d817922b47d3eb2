"""What the preflight finds: problems (each with its fix; any one fails the run), notes (facts a user
should see, never a failure) and plans (the disk and GPU plans printed for the record)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

__all__ = ["Finding", "Report"]


@dataclass(frozen=True)
class Finding:
    """One line of the preflight: ``kind`` (problem / note / plan), the ``area`` it concerns, what was
    found, and for a problem the fix."""

    kind: str
    area: str
    what: str
    fix: str = ""

    def line(self) -> str:
        head = {"problem": "PROBLEM", "note": "note", "plan": "plan"}[self.kind]
        return f"{head:<7} [{self.area}] {self.what}" + (f" -- fix: {self.fix}" if self.fix else "")


@dataclass
class Report:
    """The findings of one preflight, in order; :attr:`ok` when there is no problem."""

    profile: str
    allow_missing: tuple[str, ...] = ()
    log: Callable[[str], None] | None = None
    findings: list[Finding] = field(default_factory=list)
    seconds: float | None = None
    facts: dict = field(default_factory=dict)        # what one check learnt that a later one reads

    def _add(self, f: Finding) -> None:
        self.findings.append(f)
        if self.log:
            self.log(f.line())

    def problem(self, area: str, what: str, fix: str) -> None:
        """A defect the run would stop or drift on; ``fix`` says what to do."""
        self._add(Finding("problem", area, what, fix))

    def note(self, area: str, what: str) -> None:
        """A fact worth seeing that does not stop the run."""
        self._add(Finding("note", area, what))

    def plan(self, area: str, what: str) -> None:
        """A line of the disk / GPU plan."""
        self._add(Finding("plan", area, what))

    @property
    def problems(self) -> list[Finding]:
        return [f for f in self.findings if f.kind == "problem"]

    @property
    def ok(self) -> bool:
        return not self.problems

    def lines(self) -> list[str]:
        """Every finding as a line, problems first, then the summary line."""
        order = {"problem": 0, "note": 1, "plan": 2}
        out = [f.line() for f in sorted(self.findings, key=lambda f: order[f.kind])]
        took = f" in {self.seconds:.1f} s" if self.seconds is not None else ""
        out.append(f"preflight ({self.profile}): "
                   + ("OK" if self.ok else f"{len(self.problems)} problem(s)") + took)
        return out
