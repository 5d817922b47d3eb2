"""The chance reference of a benchmark: the pretrained frozen encoder beside the same class at random
init (``"<encoder>@random"`` in a profile's encoder lists; ID-Sim's ``random`` baseline).

A network that was never trained sees pixels, not identity. Where it scores as well as the pretrained
encoder, the benchmark's analogue rewards something a random network can read off the pixels, and that
row says so rather than being read as evidence about identity. Notebooks 04, 09 and 11 write
:func:`chance_check` tables (``*_chance.csv``); the report (:mod:`nearid_lib.report`) lists them.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

__all__ = ["chance_check", "chance_encoder", "CHANCE_COLUMNS", "RANDOM_INIT"]

RANDOM_INIT = "@random"     # "<encoder>@random" in a profile's encoder list: that encoder at random init
CHANCE_COLUMNS = ["benchmark", "group", "metric", "frozen", "random_init", "margin", "random_reaches_frozen"]


def chance_encoder(encoders: Sequence[str]) -> str | None:
    """The chance reference of an encoder list (its first ``"<name>@random"``), or None."""
    return next((n for n in encoders if n.endswith(RANDOM_INIT)), None)


def chance_check(table: pd.DataFrame, who: str, frozen: str, chance: str, metrics: Sequence[str],
                 benchmark: str, by: Sequence[str] = ()) -> pd.DataFrame:
    """One row per (``by`` values, metric) of ``table``: the value of the pretrained encoder (the row
    whose column ``who`` is ``frozen``) and of the random-init one (``who == chance``), their
    ``margin`` (frozen minus random init; every metric here is higher-is-better) and
    ``random_reaches_frozen`` (margin <= 0). ``benchmark`` names the table; ``group`` joins the ``by``
    values with " / " (empty without ``by``). A metric either row lacks (missing, NaN) is left out;
    a table with only one of the two encoders gives an empty frame (no chance row in this profile).

    Raises KeyError naming the column when ``who``, a ``by`` column or a metric is not in ``table``."""
    by = list(by)
    for col in [who, *by, *metrics]:
        if col not in table.columns:
            raise KeyError(f"chance_check({benchmark!r}): no column {col!r}; has {list(table.columns)}")
    rows = []
    sel = table[table[who].isin([frozen, chance])]
    for key, part in (sel.groupby(by, sort=False) if by else [((), sel)]):
        key = key if isinstance(key, tuple) else (key,)
        f, c = part[part[who] == frozen], part[part[who] == chance]
        if len(f) > 1 or len(c) > 1:
            raise ValueError(f"chance_check({benchmark!r}): {len(f)} {frozen!r} and {len(c)} {chance!r} rows "
                             f"for {dict(zip(by, key))}; pass the columns that make them unique as by=")
        if not len(f) or not len(c):
            continue
        for m in metrics:
            a, b = pd.to_numeric(f[m], errors="coerce").iloc[0], pd.to_numeric(c[m], errors="coerce").iloc[0]
            if not (np.isfinite(a) and np.isfinite(b)):
                continue
            rows.append({"benchmark": benchmark, "group": " / ".join(str(k) for k in key), "metric": m,
                         "frozen": float(a), "random_init": float(b), "margin": float(a - b),
                         "random_reaches_frozen": bool(b >= a)})
    return pd.DataFrame(rows, columns=CHANCE_COLUMNS)
