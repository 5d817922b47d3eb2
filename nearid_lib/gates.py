"""The declared gates of the ``paper`` path, in one place: every input a table (or one column of a
table) may be missing for, what it gates, how to get it, and whether it is missing now.

A run skips a table, or leaves a metric column empty, only because one of these inputs is absent:
a named hand download, a hub repository that is gated or not in the mirror, or data the authors
never published. :meth:`nearid_lib.run.Run.skip_table` records the gates of the skipped table that
are closed when it skips (:func:`closed_gates`), and ``make dryrun-paper``'s check
(:func:`tools.paper_fixtures.check_tables`) fails any table skipped, or any paper metric column left
without a value, with no closed gate that declares it: a table skipped for a bug fails the dry run.

Targets are table names (``04_table2_dbpp``) or ``table:column`` (``04_table1_main:dbpp_mh``), with
shell wildcards (``11_fpr_*``).
"""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import Callable

import os

from . import hub
from .runtime.reach import endpoint_reason
from .config import get_profile
from .paths import downloads_dir

__all__ = ["Gate", "GATES", "gate", "gates_for", "closed_gates", "is_closed"]


@dataclass(frozen=True)
class Gate:
    """One input of the paper path that can be absent: ``needs`` (what), ``get`` (how to get it),
    ``targets`` (the tables / ``table:column`` it gates), ``closed()`` (whether it is absent now)."""

    key: str
    needs: str
    get: str
    targets: tuple[str, ...]
    closed: Callable[[], bool]

    def gates(self, table: str, column: str | None = None) -> bool:
        """Whether this gate declares ``table`` (or its ``column``)."""
        name = table if column is None else f"{table}:{column}"
        return any(fnmatch.fnmatchcase(name, t) for t in self.targets)


def _downloads(*parts: str) -> Callable[[], bool]:
    def closed() -> bool:
        return not downloads_dir().joinpath(*parts).exists()
    return closed


def _hub(repo: str, kind: str) -> Callable[[], bool]:
    def closed() -> bool:
        return not hub.is_available(repo, kind)
    return closed


def _always() -> bool:
    return True


def _dbpp_closed() -> bool:
    return not (downloads_dir() / "dreambenchpp").is_dir()


def _gpt_closed() -> bool:
    """No OpenAI key and no OpenAI-compatible server (``retrieval.gpt_base_url`` of the paper profile,
    with ``NEARID_SET``, or ``$OPENAI_BASE_URL``), or the server they name not reachable from this
    node (:func:`nearid_lib.runtime.reach.endpoint_reason`, checked once per process): the DB++
    column of the FPR tables is not computed."""
    base = get_profile("paper").retrieval.gpt_base_url
    if not (os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL") or base):
        return True
    return endpoint_reason(base) is not None


def _gpt_prompts_closed() -> bool:
    """DreamBench++'s two subject prompts are in none of the places :mod:`nearid_lib.fpr.gpt_score` reads."""
    root = downloads_dir() / "dreambenchpp"
    files = ("user_prompt_subject_full.txt", "gpt_prompt_subject_full.txt")
    return not any(all((d / f).is_file() for f in files) for d in (root / "dreambench_plus" / "prompts",
                                                                    root / "prompts", root))


_DBPP_COLUMNS = ("04_table1_main:dbpp_mh", "05_table3_loss_ablation:dbpp_mh", "05_table10_infonce:dbpp_mh",
                 "05_table10_infonce:delta_mh", "06_table8_alpha:dbpp_mh", "06_table9_beta:dbpp_mh",
                 "09_idsim_mllm:dreambench_spearman", "09_idsim_patch:dreambench_spearman")

GATES: dict[str, Gate] = {g.key: g for g in (
    Gate("dreambenchpp", "DreamBench++ (evaluation data, the 7 methods' samples, human ratings) at "
         "$NEARID_DOWNLOADS/dreambenchpp", "docs/paper-profile.md, 'Hand downloads' (yuangpeng/dreambench_plus)",
         ("04_table2_dbpp", "04_fig4_dbpp_per_category", *_DBPP_COLUMNS), _dbpp_closed),
    Gate("nearid_release", "the NearID authors' GitHub release (official splits, per-image DreamBench++ "
         "scores) at $NEARID_DOWNLOADS/NearID", "python -m nearid_lib.hub download $MIRROR --downloads "
         "$NEARID_DOWNLOADS (a git clone of Gorluxor/NearID)", ("04_dbpp_released_*",),
         _downloads("NearID", "dreambench_plus", "ratings")),
    # the VLM judges (nearid.judges): a closed one is skipped where it would run, its rows of Tables 1
    # and 7 kept empty with the reason, and 04_vlm_judges says which and why (judge.plan.judge_gate)
    Gate("vlm_judge", "the Qwen3-VL-30B-A3B judge (Qwen/Qwen3-VL-30B-A3B-Instruct) in the mirror: Table 1's and "
         "Table 7's Qwen3-VL 30B rows", "python -m nearid_lib.hub download $MIRROR --only "
         "Qwen/Qwen3-VL-30B-A3B-Instruct", ("04_vlm_judges",), _hub("Qwen/Qwen3-VL-30B-A3B-Instruct", "model")),
    Gate("vlm_judge_scales", "Table 7's other judge scales (Qwen/Qwen3-VL-4B-Instruct, Qwen/Qwen3-VL-8B-Instruct) "
         "in the mirror", "python -m nearid_lib.hub download $MIRROR --only Qwen/Qwen3-VL-4B-Instruct "
         "(and -8B-Instruct)", ("04_vlm_judges",),
         lambda: any(_hub(f"Qwen/Qwen3-VL-{b}-Instruct", "model")() for b in ("4B", "8B"))),
    Gate("judge_template", "the authors' judge template evaluation/vl_template_v2.txt (their GitHub release at "
         "$NEARID_DOWNLOADS/NearID; judge.prompt_file) for their Qwen3-VL rows", "python -m nearid_lib.hub download "
         "$MIRROR --downloads $NEARID_DOWNLOADS (a git clone of Gorluxor/NearID)", ("04_vlm_judges",),
         _downloads("NearID", "evaluation", "vl_template_v2.txt")),
    Gate("subjects2k", "the hub dataset chaenayo/Subjects2k", "python -m nearid_lib.hub download $MIRROR "
         "--only chaenayo/Subjects2k", ("09_idsim_mllm:subjects2k_ap", "09_idsim_patch:subjects2k_ap"),
         _hub("chaenayo/Subjects2k", "dataset")),
    Gate("idsim_public_benchmarks", "both public ID-Sim benchmarks (Subjects2k and DreamBench++)",
         "the 'subjects2k' and 'dreambenchpp' gates", ("09_idsim_benchmarks", "09_idsim_mllm", "09_idsim_patch",
                                                       "claims_09_idsim"),
         lambda: _hub("chaenayo/Subjects2k", "dataset")() and _dbpp_closed()),
    Gate("dinov3", "the gated DINOv3 weights facebook/dinov3-vitl16-pretrain-lvd1689m (accept Meta's licence)",
         "python -m nearid_lib.hub download $MIRROR --only facebook/dinov3-vitl16-pretrain-lvd1689m",
         ("09_idsim_patch", "claims_09_idsim"), _hub("facebook/dinov3-vitl16-pretrain-lvd1689m", "model")),
    Gate("idsim_release", "the released ID-Sim chaenayo/id-sim_dinov3_vitl16_cls_patch (the claims' ID-Sim side)",
         "python -m nearid_lib.hub download $MIRROR --only chaenayo/id-sim_dinov3_vitl16_cls_patch",
         ("claims_09_idsim",), _hub("chaenayo/id-sim_dinov3_vitl16_cls_patch", "model")),
    Gate("idsim_training_set", "ID-Sim's curated training set (real instance pairs + generative edits, App. A), "
         "never published", "not obtainable: the training ablations need it",
         ("09_idsim_scale", "09_idsim_composition", "09_idsim_backbone", "09_idsim_cls_patch", "09_idsim_loss",
          "09_idsim_data_ablation"), _always),
    Gate("idsim_unpublished_benchmarks", "ID-Sim's evaluation subsets of PODS (PerSAM masks), DeepFashion2, "
         "AerialCattle, PetFace and CUTE, never published", "not obtainable", ("09_idsim_persam",), _always),
    Gate("idsim_sensitivity_grids", "ID-Sim's selective-sensitivity edit grids (App. F), 'coming soon' in the "
         "authors' release", "not obtainable yet", ("10_sensitivity", "claims_10_sensitivity"), _always),
    Gate("fpr_cub", "CUB-200-2011 at $NEARID_DOWNLOADS/CUB_200_2011", "docs/paper-profile.md, 'FPR data'",
         ("11_fpr_cub_*",), _downloads("CUB_200_2011", "images.txt")),
    Gate("fpr_wildlife", "WildlifeReID-10k at $NEARID_DOWNLOADS/WildlifeReID-10k", "docs/paper-profile.md, 'FPR data'",
         ("11_fpr_leopard", "11_fpr_cow", "11_fpr_zebra", "11_fpr_tiger", "11_fpr_giraffe"),
         _downloads("WildlifeReID-10k", "metadata.csv")),
    Gate("fpr_cars", "the hub dataset Donghyun99/Stanford-Cars", "python -m nearid_lib.hub download $MIRROR "
         "--only Donghyun99/Stanford-Cars", ("11_fpr_stanford_cars",), _hub("Donghyun99/Stanford-Cars", "dataset")),
    Gate("fpr_generated", "the personalized generators' images at $NEARID_DOWNLOADS/fpr_generated (not released "
         "by the FPR authors; generate them, docs/paper-profile.md 'FPR data')", "docs/paper-profile.md, 'FPR data'",
         ("11_fpr_*", "claims_11_retrieval"), _downloads("fpr_generated")),
    Gate("fpr_gpt", "an OpenAI key ($OPENAI_API_KEY) or an OpenAI-compatible server (retrieval.gpt_base_url, "
         "$OPENAI_BASE_URL), reachable from this node, for DreamBench++'s GPT score",
         "docs/paper-profile.md, 'The DB++ column'",
         ("11_fpr_*:dbpp",), _gpt_closed),
    Gate("fpr_gpt_prompts", "DreamBench++'s prompts user_prompt_subject_full.txt / gpt_prompt_subject_full.txt in "
         "$NEARID_DOWNLOADS/dreambenchpp (dreambench_plus/prompts of its GitHub repository)",
         "docs/paper-profile.md, 'The DB++ column'", ("11_fpr_*:dbpp",), _gpt_prompts_closed),
    Gate("fpr_galleries", "every FPR gallery download (CUB, WildlifeReID-10k, Stanford Cars)",
         "the fpr_cub, fpr_wildlife and fpr_cars gates", ("11_fpr_*", "claims_11_retrieval"),
         lambda: all(GATES[k].closed() for k in ("fpr_cub", "fpr_wildlife", "fpr_cars"))),
)}


def gate(key: str) -> Gate:
    """The gate ``key``; an unknown key is a KeyError listing the declared ones."""
    if key not in GATES:
        raise KeyError(f"unknown gate {key!r}; declared: {sorted(GATES)}")
    return GATES[key]


def gates_for(table: str, column: str | None = None) -> list[Gate]:
    """Every gate that declares ``table`` (or ``table:column``)."""
    return [g for g in GATES.values() if g.gates(table, column)]


def is_closed(key: str) -> bool:
    """Whether the input of gate ``key`` is absent now."""
    return bool(gate(key).closed())


def closed_gates(table: str, column: str | None = None) -> list[str]:
    """The keys of the gates of ``table`` (or its ``column``) whose input is absent now: the declared
    reasons a run may skip it (or leave the column empty)."""
    return [g.key for g in gates_for(table, column) if g.closed()]
