"""What the VLM judge needs before it runs, decided without loading it: whether it can run at all (a
declared gate: :func:`judge_gate`), the judge scales of NearID Table 7 (:data:`JUDGE_MODELS`) and
the template file of the authors' prompt. Where its replicas run is the one placement rule of every
large model (:func:`nearid_lib.steps.placement.plan_replicas`), and what it costs per pair is the
resource ledger's (``nearid_lib.nearid.gpu_work``: NearID App. D's measurement).

The authors load Qwen3-VL with ``device_map="auto"`` (their ``evaluation/sim_test.py``): one copy
of the model spread over every visible GPU. Under a launch of one process per GPU we place one
*replica* per group of GPUs that holds the model: a bf16 Qwen3-VL-30B-A3B (~62 GB of weights) fits
one 80 GB H100 (8 replicas on an 8-GPU node) but needs two 40 GB A100s (4 replicas, the first rank
of each pair judging with ``device_map="auto"`` over the pair's ``max_memory``, the other idle).
"""
from __future__ import annotations

import os
from pathlib import Path

from ..paths import downloads_dir
from ..steps.ledger import Cost, suite_cost, suite_entry
from ..steps.placement import MODEL_PARAMS

__all__ = ["JUDGE_MODELS", "SCALE_LABELS", "judge_gate", "scale_label", "prompt_path", "DOWNLOADS_TOKEN",
           "JUDGE_SECONDS_PER_PAIR", "judge_cost"]

SCALE_LABELS = {"Qwen/Qwen3-VL-4B-Instruct": "4B", "Qwen/Qwen3-VL-8B-Instruct": "8B",
                "Qwen/Qwen3-VL-30B-A3B-Instruct": "30B"}
# NearID App. E.7 / Table 7: the Qwen3-VL judge at three scales (parameters: the placement catalogue's)
JUDGE_MODELS: dict[str, float] = {m: MODEL_PARAMS[m][0] for m in SCALE_LABELS}


# NearID App. D: the Qwen3-VL-30B judge takes ~3 h on an A100 per distractor source and masking
# condition of the 500 test samples, whose positive and distractor pairs the authors' script judges
# per source (about 2,000 pairs at the release's 2.33 views per identity): ~5.4 s a pair at ~260
# answer tokens. The plan uses this measurement, not an unmeasured batched projection (about 0.45 s
# a pair on an H100 at 4 pairs a batch): decoding in transformers is bound by per-token overheads
# far above the weights' bandwidth (3 B active parameters would allow ~3 ms a token on an A100).
# The 4B and 8B scales are costed the same (not measured by anyone; no faster basis is known).
JUDGE_SECONDS_PER_PAIR = 3 * 3600 / (500 * (1 + 6_433 / 19_386 * 2) + 500 * (2 + 6_433 / 19_386))


def judge_cost() -> Cost:
    """The judge's per-pair cost: the GPU suite's measurement when one is committed
    (``benchmarks/results/gpu_suite_cuda.json``), else :data:`JUDGE_SECONDS_PER_PAIR` (NearID App. D)."""
    jd = suite_entry("judge")
    if jd and jd.get("pairs_per_s_at_250_tokens"):
        rep = max(1, jd.get("replicas_per_gpu") or 1)
        return suite_cost(jd, 1.0 / (jd["pairs_per_s_at_250_tokens"] * rep), "memory",
                          f"{jd['pairs_per_s_at_250_tokens']:.2f} pairs/s per replica at batch {jd.get('best_batch')}, "
                          f"{rep} replica(s) per GPU, 250-token answers")
    return Cost(JUDGE_SECONDS_PER_PAIR, "A100-80GB", "memory", "measured by the authors",
                "NearID App. D: ~3 A100-hours per source and masking condition of 500 test samples "
                f"(~2,000 pairs as their script counts them): {JUDGE_SECONDS_PER_PAIR:.1f} s a pair")


def scale_label(model: str) -> str:
    """``"4B"`` / ``"8B"`` / ``"30B"`` for the paper's judges, else the model's folder name."""
    return SCALE_LABELS.get(model, str(model).rstrip("/").split("/")[-1])


# ``{downloads}`` in ``judge.prompt_file`` stands for the hand-downloads folder ($NEARID_DOWNLOADS), so
# the paper profile can name the authors' template of their GitHub release without a machine's path
DOWNLOADS_TOKEN = "{downloads}"


def prompt_path(value: str | os.PathLike | None) -> Path | None:
    """The file ``judge.prompt_file`` names (``{downloads}`` replaced by :func:`~nearid_lib.paths.downloads_dir`,
    ``~`` expanded), None when no template is configured."""
    if value is None or not str(value).strip():
        return None
    return Path(str(value).replace(DOWNLOADS_TOKEN, str(downloads_dir()))).expanduser()


def judge_gate(model: str | None, prompt_file: str | None, available) -> str | None:
    """Why the judge ``model`` cannot run now (None: it can): no judge configured
    (``eval.vlm_judge`` none), its weights not readable (``available(model) -> bool``, e.g.
    :func:`nearid_lib.hub.is_available`), or its configured template file missing or empty. The
    caller skips the judge's rows and says this reason in the tables and the report."""
    if not model or str(model).strip().lower() in ("none", "null"):
        return "no VLM judge configured (eval.vlm_judge=none)"
    if model != "tiny" and not available(model):
        return (f"the judge's weights {model} are not in the local hub mirror (python -m nearid_lib.hub download "
                f"$NEARID_HUB_DIR --only {model})")
    if prompt_file:
        p = prompt_path(prompt_file)
        if not p.is_file() or not p.read_text(encoding="utf-8", errors="replace").strip():
            return (f"the judge template judge.prompt_file={p} is missing or empty (the authors' "
                    f"evaluation/vl_template_v2.txt of their GitHub release, $NEARID_DOWNLOADS/NearID)")
    return None
