"""Defects a real mirror can have, applied to a fixture mirror, so that the preflight's answer to
each can be seen (``python -m tools.paper_fixtures damage HUB DOWNLOADS``, then ``make
dryrun-paper DRYRUN_HUB=HUB DRYRUN_DOWNLOADS=DOWNLOADS`` fails before any notebook, naming each) and
tested (``tests/test_preflight.py``). Files are replaced, never written through, so a mirror copied
with hard links keeps its original intact."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

__all__ = ["DEFECTS", "damage"]


def _drop_column(hub: Path, downloads: Path, column: str = "masks2") -> str:
    """The positives without one column of their card."""
    import pyarrow.parquet as pq

    f = next((hub / "Aleksandar" / "NearID" / "data").glob("train-*.parquet"))
    table = pq.read_table(f)
    f.unlink()
    pq.write_table(table.drop_columns([column]), f)
    return f"Aleksandar/NearID without its column {column!r}"


def _truncate_distractors(hub: Path, downloads: Path, source: str = "Flux") -> str:
    """A distractor repository with one of its arrow shards gone (a download cut short)."""
    split = hub / "Aleksandar" / f"NearID-{source}" / "train"
    shard = sorted(split.glob("data-*.arrow"))[-1]
    shard.unlink()
    return f"Aleksandar/NearID-{source} without its shard {shard.name}"


def _drop_template(hub: Path, downloads: Path) -> str:
    """The authors' release without the judge's template."""
    (downloads / "NearID" / "evaluation" / "vl_template_v2.txt").unlink()
    return "the authors' release without evaluation/vl_template_v2.txt"


def _drop_repo(hub: Path, downloads: Path, repo: str = "google/siglip2-so400m-patch14-384") -> str:
    """A repository the run needs, not downloaded."""
    import shutil

    shutil.rmtree(hub / repo)
    (hub / ".nearid-downloads" / f"{repo}.json").unlink(missing_ok=True)
    return f"{repo} absent"


def _bad_split(hub: Path, downloads: Path) -> str:
    """A split file listing one row twice."""
    f = downloads / "NearID" / "splits" / "test.json"
    rows = json.loads(f.read_text())
    f.unlink()
    f.write_text(json.dumps(rows + rows[:1]))
    return "splits/test.json listing a row twice"


DEFECTS: dict[str, Callable[[Path, Path], str]] = {
    "column": _drop_column, "truncated": _truncate_distractors, "template": _drop_template,
    "repo": _drop_repo, "split": _bad_split,
}


def damage(hub: str | Path, downloads: str | Path, defects=("column", "truncated", "template")) -> list[str]:
    """Apply ``defects`` (keys of :data:`DEFECTS`) to the fixture mirror ``hub`` / ``downloads``;
    returns what each did."""
    return [DEFECTS[d](Path(hub), Path(downloads)) for d in defects]
