"""A tiny FPR layout on disk shared by the FPR protocol, encoder and experiment tests."""
from __future__ import annotations

import numpy as np
import pandas as pd
from PIL import Image

from nearid_lib.fpr import write_fpr_table


def _fixture(tmp_path):
    """Two species x two identities; identity = a colour, images = noisy squares of it."""
    rng = np.random.default_rng(0)
    cols = {"a": (200, 30, 30), "b": (30, 200, 30), "c": (30, 30, 200), "d": (200, 200, 30)}
    rows = {"train": [], "gallery": [], "generated": []}
    for name, c in cols.items():
        sp = "s1" if name in "ab" else "s2"
        for kind, n in (("train", 2), ("gallery", 3), ("generated", 2)):
            for k in range(n):
                arr = np.clip(np.array(c)[None, None] + rng.normal(0, 20, (32, 32, 3)), 0, 255).astype(np.uint8)
                p = tmp_path / kind / f"{name}__{k}.png"
                p.parent.mkdir(parents=True, exist_ok=True)
                Image.fromarray(arr).save(p)
                rows[kind].append({"name": name, "species": sp, "file_path": f"{kind}/{name}__{k}.png",
                                   "ref_path": f"train/{name}__0.png", "method": "m1" if k == 0 else "m2"})
    write_fpr_table(pd.DataFrame(rows["train"]).drop(columns="method"), tmp_path / "train_data.csv", "train")
    write_fpr_table(pd.DataFrame(rows["gallery"]).drop(columns="method"), tmp_path / "gallery_data.csv")
    write_fpr_table(pd.DataFrame(rows["generated"]), tmp_path / "generated_data.csv", "generated")
    return tmp_path
