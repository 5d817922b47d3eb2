"""Rows of the paper's NearID tables that this run cannot score, shown with the reason instead of
being left out: VSM (no public code for the metric) and every encoder the profile asked for that is
behind a declared gate (a VLM judge without its weights or template, the released weights absent;
:class:`~nearid_lib.nearid.scorers.BenchEncoders` ``.gated``).

Such a row has its paper key, empty metric cells, ``why_empty`` (the reason) and an ``ours_label``
that starts with "not computed here:", which the report prints beside the paper's numbers. VSM's
DreamBench++ cell is the one that can be computed: from the authors' released per-image scores
(``dreambench_plus/ratings/data_vsm_rating``, :mod:`.dbpp_released`) when they are downloaded.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import pandas as pd

from ..models import resolve_name
from .tables import paper_keys

__all__ = ["VSM_WHY", "VSM_KEYS", "NOT_COMPUTED", "PAPER_BASELINES", "unscored_rows", "gated_rows", "absent_baselines"]

NOT_COMPUTED = "not computed here: "
VSM_WHY = ("VSM (Mind-the-Glitch's visual semantic matching, trained on MTG) has no public code: "
           "github.com/abdo-eldesokey/mind-the-glitch says 'The code to be released soon', and the NearID "
           "authors' evaluation/sim_test.py imports an unreleased `mtg` package; its NearID and MTG cells "
           "cannot be computed")
# VSM's key in Table 1, 5 and 7 (paper_values)
VSM_KEYS = ("VSM*", "VSM", "VSM")
_TABLE_INDEX = {"row": 0, "method": 2}          # key column -> position in paper_keys / VSM_KEYS
# Table 7's smaller judge scales are no rows of the paper's Table 1: not listed there when gated
_TABLE7_ONLY = {"vlm-4b", "vlm-8b"}


def unscored_rows(table: pd.DataFrame, key: str, rows: Mapping[str, str], profile: str,
                  values: Mapping[str, Mapping[str, float | str]] | None = None) -> pd.DataFrame:
    """``table`` with one row appended per ``rows`` entry (``{paper key: reason}``) whose key it
    lacks: the key in column ``key``, ``ours_label`` = "not computed here: <reason>", ``why_empty``
    = the reason, NaN in every metric column except the cells of ``values[key]`` (e.g. VSM's
    ``dbpp_mh`` from the released scores). Existing rows get ``why_empty`` = ""."""
    out = table.copy()
    if "why_empty" not in out.columns:
        out["why_empty"] = ""
    have = set(out[key].astype(str)) if key in out.columns else set()
    add = []
    for k, why in rows.items():
        if k in have:
            continue
        row = {c: np.nan for c in out.columns if c not in (key, "ours_label", "profile", "why_empty")}
        row.update({key: k, "ours_label": NOT_COMPUTED + why, "profile": profile, "why_empty": why,
                    **dict((values or {}).get(k, {}))})
        add.append(row)
    return pd.concat([out, pd.DataFrame(add)], ignore_index=True) if add else out


def gated_rows(gated: Mapping[str, str], key: str, vsm: bool = True) -> dict[str, str]:
    """``{paper key: reason}`` for ``key`` (``"row"``: Table 1, ``"method"``: Table 7) from
    ``gated`` (``{encoder name: reason}``), plus VSM's row unless ``vsm`` is False. An encoder gated
    with an empty reason is left out (nothing was asked for)."""
    i = _TABLE_INDEX[key]
    out = {VSM_KEYS[i]: VSM_WHY} if vsm else {}
    out.update({paper_keys(name)[i]: why for name, why in gated.items()
                if why and not (key == "row" and name in _TABLE7_ONLY)})
    return out


# The frozen baselines of the paper's Tables 1 and 7 besides the backbone itself (our encoder names)
PAPER_BASELINES = ("clip-vit-l14", "dinov2-large")


def absent_baselines(encoders: Sequence[str], key: str) -> dict[str, str]:
    """``{paper key: reason}`` for each of :data:`PAPER_BASELINES` that the profile's ``encoders``
    (``eval.encoders``) do not score (``key`` as for :func:`gated_rows`): its row stays in the table,
    empty, with the reason instead of a blank."""
    i = _TABLE_INDEX[key]
    asked = set()
    for name in encoders:
        try:
            asked.add(resolve_name(str(name).split("@")[0]))
        except Exception:  # noqa: BLE001 - an unknown name asks for no baseline
            continue
    return {paper_keys(name)[i]: (f"not among this profile's eval.encoders ({', '.join(map(str, encoders))}): the "
                                  "offline profiles (smoke, mini) read no weights from the Hugging Face hub; the paper "
                                  "profile's default list scores it")
            for name in PAPER_BASELINES if name not in asked}
