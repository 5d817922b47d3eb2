"""scripts/compare_runs.py: the exact table check and the claim-by-claim verdict check, run as a
user runs them (the script as a subprocess) on two small runs written here."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "compare_runs.py"


def _run(root: Path, verdicts: dict[str, str], estimate: float, table_value: float) -> Path:
    (root / "tables").mkdir(parents=True)
    rows = [{"key": k, "claim": f"claim {k}", "verdict": v, "estimate": estimate, "ci_low": estimate - 1,
             "ci_high": estimate + 1} for k, v in verdicts.items()]
    rows.append({"key": None, "claim": "a point-valued claim", "verdict": "holds", "estimate": float("nan"),
                 "ci_low": float("nan"), "ci_high": float("nan")})
    pd.DataFrame(rows).to_csv(root / "tables" / "claims_04_eval.csv", index=False)
    pd.DataFrame({"row": ["a"], "ssr": [table_value], "seconds": [table_value * 7]}).to_csv(
        root / "tables" / "04_table1_main.csv", index=False)
    return root


def _compare(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True)


def test_same_verdicts_with_moved_numbers(tmp_path):
    a = _run(tmp_path / "a", {"1a": "holds", "2d": "inconclusive"}, 0.5, 76.27)
    b = _run(tmp_path / "b", {"1a": "holds", "2d": "inconclusive"}, 0.5000001, 76.03)
    out = _compare(a, b, "--verdicts")
    assert out.returncode == 0, out.stdout
    assert "0 differ (0 leaning, 0 outside the leaning ones), 2 same verdict with moved numbers, 1 identical" in out.stdout
    # the exact check sees the moved table value (the timing column alone would not fail it)
    exact = _compare(a, b)
    assert exact.returncode == 1 and "04_table1_main.csv: DIFFERENT in ['ssr']" in exact.stdout
    assert _compare(a, b, "--atol", "0.5").returncode == 0


def test_a_flipped_or_missing_verdict_fails_and_is_named(tmp_path):
    a = _run(tmp_path / "a", {"1a": "holds", "2d": "inconclusive", "2e": "holds"}, 0.5, 1.0)
    b = _run(tmp_path / "b", {"1a": "holds", "2d": "does not hold"}, 0.5, 1.0)
    out = _compare(a, b, "--verdicts")
    assert out.returncode == 1
    assert "2d: inconclusive (estimate 0.5, ci_low -0.5, ci_high 1.5; ours: ) -> does not hold" in out.stdout
    assert "2e: only in" in out.stdout
    assert ("verdicts: 2 differ (0 leaning, 2 outside the leaning ones), 0 same verdict with moved numbers, "
            "2 identical") in out.stdout
    assert "flips outside the leaning verdicts:" in out.stdout and "flips of leaning" not in out.stdout


def test_a_flip_of_a_leaning_verdict_is_listed_apart_and_does_not_fail(tmp_path):
    """2d-like: an interval of a trained comparison whose lower end sits near its criterion flips in
    the twin; that is what the report's "leaning" mark warns of, so it is listed apart and the exit
    status stays 0 (issue 53, item 3). The same flip of an untrained claim fails."""
    def run(root, low, high, verdict, seeds):
        (root / "tables").mkdir(parents=True)
        pd.DataFrame([{"key": "2d", "claim": "c", "verdict": verdict, "estimate": (low + high) / 2, "ci_low": low,
                       "ci_high": high, "criterion": "|a - b| <= 5.0%", "seeds": seeds}]).to_csv(
            root / "tables" / "claims_04_eval.csv", index=False)
        return root

    a = run(tmp_path / "a", 0.028, 0.125, "inconclusive", "3/3")
    b = run(tmp_path / "b", 0.054, 0.114, "does not hold", "3/3")
    out = _compare(a, b, "--verdicts")
    assert out.returncode == 0, out.stdout
    assert "flips of leaning verdicts" in out.stdout and "[leaning does not hold]" in out.stdout
    assert "verdicts: 1 differ (1 leaning, 0 outside the leaning ones)" in out.stdout
    c = run(tmp_path / "c", 0.028, 0.125, "inconclusive", "1/1")
    d = run(tmp_path / "d", 0.054, 0.114, "does not hold", "1/1")
    assert _compare(c, d, "--verdicts").returncode == 1


def test_a_figure_is_compared_by_its_pixels_not_its_provenance(tmp_path):
    """Each PNG names the commit that made it (its text chunks): two runs at two commits that drew the
    same pixels have the same figure; one changed pixel is a difference."""
    import numpy as np
    from PIL import Image
    from PIL.PngImagePlugin import PngInfo

    a, b = (_run(tmp_path / n, {"1a": "holds"}, 0.5, 1.0) for n in ("a", "b"))
    px = np.zeros((8, 8, 3), np.uint8)
    for root, sha in ((a, "aaaaaaa"), (b, "bbbbbbb")):
        info = PngInfo()
        info.add_text("Source", f"nearid_lib at {sha}")
        Image.fromarray(px).save(root / "04_overview.png", pnginfo=info)
    assert (a / "04_overview.png").read_bytes() != (b / "04_overview.png").read_bytes()
    out = _compare(a, b)
    assert out.returncode == 0 and "0 non-timing difference(s)" in out.stdout, out.stdout
    px[3, 3] = 1
    Image.fromarray(px).save(b / "04_overview.png")
    out = _compare(a, b)
    assert out.returncode == 1 and "04_overview.png: figure differs" in out.stdout
