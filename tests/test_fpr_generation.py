"""FPR's generation step on tiny real pipelines: every method writes its images, a finished
subject is never redone, two shards write the bytes of one, the user's folder wins and is recorded
as the source, and the paper path loads each method from a hub mirror in the published layout."""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from PIL import Image

from nearid_lib.config import get_profile
from nearid_lib.data.fpr_layout import write_fpr_table
from nearid_lib.fpr import generation as G
from nearid_lib.fpr.downloads import collect_generated
from nearid_lib.generate import personalize as P
from tools.tiny_models.pipelines import (IP_ADAPTER_WEIGHT_NAMES, build_tiny_flux_fill_pipeline,
                                                build_tiny_flux_kontext_pipeline, build_tiny_sd3_pipeline,
                                                build_tiny_sdxl_pipeline, write_tiny_ip_adapter)

torch.set_num_threads(1)

TINY = {"retrieval.prompts_per_id": "2", "retrieval.generate_px": "32", "retrieval.generate_steps": "2",
        "retrieval.dreambooth_steps": "2", "retrieval.dreambooth_px": "32", "retrieval.dreambooth_class_images": "2",
        "generate.mixed_precision": "no"}


def _folders(root: Path) -> dict[str, Path]:
    """Two FPR datasets (a Re-ID species and a CUB group), two subjects each, two 32 px references."""
    rng = np.random.default_rng(0)
    out = {}
    for key, species in (("leopard", "leopard"), ("cub_sparrow", "sparrow")):
        rows, gal = [], []
        for n in range(2):
            for k in range(3):
                p = root / "img" / key / f"s{n}_{k}.png"
                p.parent.mkdir(parents=True, exist_ok=True)
                Image.fromarray(rng.integers(0, 255, (32, 32, 3), dtype=np.uint8)).save(p)
                (rows if k < 2 else gal).append({"name": f"{key}{n}", "species": species, "file_path": str(p),
                                                 "ref_path": str(p)})
        out[key] = root / "fpr" / key
        write_fpr_table(pd.DataFrame(rows), out[key] / "train_data.csv", "train")
        write_fpr_table(pd.DataFrame(gal), out[key] / "gallery_data.csv", "gallery")
    return out


@pytest.fixture(scope="module")
def pipes(tmp_path_factory):
    sdxl = build_tiny_sdxl_pipeline(0)
    plus = build_tiny_sdxl_pipeline(0)
    d = tmp_path_factory.mktemp("ipa")
    for pipe, is_plus in ((sdxl, False), (plus, True)):
        write_tiny_ip_adapter(d, pipe, plus=is_plus)
        pipe.load_ip_adapter(str(d), subfolder="sdxl_models", weight_name=IP_ADAPTER_WEIGHT_NAMES[is_plus],
                             image_encoder_folder=None)
        pipe.set_ip_adapter_scale(0.6)
    return {"ip_adapter": sdxl, "ip_adapter_plus": plus, "flux_kontext": build_tiny_flux_kontext_pipeline(0),
            "diptych": build_tiny_flux_fill_pipeline(0), "dreambooth": build_tiny_sd3_pipeline(0, with_t5=False)}


def _digest(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*.png")) if "_work" not in p.parts}


def test_prompts_and_method_names():
    assert P.fpr_prompts("leopard")[0] == "a leopard in a grassy field" and len(P.fpr_prompts("cub_tern")) == 10
    assert P.fpr_prompts("stanford_cars", token="sks")[0] == "a photo of a sks car on a dirt road sided by cornfields"
    assert P.fpr_prompts("cub_wren")[1] == "a wren on the beach"
    assert [P.method_key(n) for n in ("IP-Adapter", "IP Adapter Plus", "flux_kontext", "DreamBooth", "Emu2")] == \
        ["ip_adapter", "ip_adapter_plus", "flux_kontext", "dreambooth", "emu2"]
    canvas, mask = P.diptych_inputs(Image.new("RGB", (10, 10), "red"), panel=16, margin=2)
    assert canvas.size == (40, 20) and mask.getpixel((5, 5)) == 0 and mask.getpixel((25, 5)) == 255
    assert canvas.getpixel((5, 5)) == (255, 0, 0) and canvas.getpixel((25, 5)) == (0, 0, 0)


def test_every_method_generates_resumes_and_shards_identically(pipes, tmp_path):
    cfg = get_profile("paper", TINY)
    folders = _folders(tmp_path)
    one = G.generate_fpr(cfg, folders, tmp_path / "one", methods=list(pipes), pipes=pipes,
                         user_root=tmp_path / "none", progress=False)
    assert one.generated == {m: 4 for m in pipes} and one.images == {m: 8 for m in pipes}
    for m in pipes:
        for s in G.subjects_of(folders):
            ims = [Image.open(G.subject_dir(tmp_path / "one", m, s) / f"{i}.png") for i in range(2)]
            assert all(im.size == (32, 32) for im in ims), m
            assert not np.array_equal(np.asarray(ims[0]), np.asarray(ims[1])), m    # own seed, own prompt
    assert not (tmp_path / "one" / "_work" / "dreambooth" / "leopard" / "leopard0").exists()  # weights deleted
    # a finished subject is never redone
    again = G.generate_fpr(cfg, folders, tmp_path / "one", methods=list(pipes), pipes=pipes,
                           user_root=tmp_path / "none", progress=False)
    assert again.generated == {} and again.finished_before == {m: 4 for m in pipes}
    # two shards (a torchrun of 2 ranks) write the bytes of one process
    for r in (1, 0):
        G.generate_fpr(cfg, folders, tmp_path / "two", methods=list(pipes), pipes=pipes,
                       user_root=tmp_path / "none", shard=(r, 2), progress=False)
    assert _digest(tmp_path / "one") == _digest(tmp_path / "two") and len(_digest(tmp_path / "one")) == 40


def test_user_folder_wins_and_is_recorded(pipes, tmp_path):
    cfg = get_profile("paper", TINY)
    folders = _folders(tmp_path)
    user = tmp_path / "user"
    for n in range(2):
        p = user / "IP-Adapter" / "leopard" / f"leopard{n}" / "a.png"
        p.parent.mkdir(parents=True)
        Image.new("RGB", (32, 32), "blue").save(p)
    run = G.generate_fpr(cfg, folders, tmp_path / "gen", methods=["ip_adapter", "flux_kontext"], pipes=pipes,
                         user_root=user, progress=False)
    assert run.user_folder["ip_adapter"] == ["leopard"] and run.generated == {"ip_adapter": 2, "flux_kontext": 4}
    assert not (tmp_path / "gen" / "ip_adapter" / "leopard").exists()
    # an unfinished subject (no _done.json) is not read
    s = next(s for s in G.subjects_of(folders) if s.dataset == "cub_sparrow")
    (G.subject_dir(tmp_path / "gen", "flux_kontext", s) / "_done.json").unlink()
    train = pd.read_csv(folders["leopard"] / "train_data.csv")
    leo = collect_generated(user, "leopard", train, tmp_path / "gen")
    src = leo.groupby("method").source.first()
    assert src["IP Adapter"].startswith("user folder") and src["Flux Kontext"].startswith("generated here")
    assert (leo[leo.method == "Flux Kontext"].ref_path.isin(train.file_path)).all()
    cub = collect_generated(user, "cub_sparrow", pd.read_csv(folders["cub_sparrow"] / "train_data.csv"),
                            tmp_path / "gen")
    assert sorted(cub.groupby("method").name.nunique().items()) == [("Flux Kontext", 1), ("IP Adapter", 2)]
    with pytest.raises(ValueError, match="user folder"):
        G.generate_fpr(cfg, folders, tmp_path / "x", methods=["emu2"], pipes=pipes, progress=False)


def test_paper_path_loads_each_method_from_the_mirror(tmp_path, monkeypatch):
    from diffusers.models.embeddings import ImageProjection, IPAdapterPlusImageProjection

    from tools.paper_fixtures.personalize import write_personalize_models

    repos = write_personalize_models(tmp_path / "hub")
    assert "h94/IP-Adapter" in repos and "black-forest-labs/FLUX.1-Fill-dev" in repos
    monkeypatch.setenv("NEARID_HUB_DIR", str(tmp_path / "hub"))
    expect = {"ip_adapter": ImageProjection, "ip_adapter_plus": IPAdapterPlusImageProjection}
    ref = Image.new("RGB", (32, 32), "green")
    for m in P.GENERATED_HERE:
        pipe = P.load_method_pipeline(m, "cpu", "no")
        assert type(pipe).__name__ == P.METHODS[m].pipeline
        if m in expect:
            assert isinstance(pipe.unet.encoder_hid_proj.image_projection_layers[0], expect[m])
        im = P.generate_image(m, pipe, "a leopard in a grassy field", ref, seed=3, cls="leopard", px=32, steps=2)
        assert im.size == (32, 32), m
