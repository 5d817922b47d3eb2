"""The released NearID weights scored at the guide's precision (issue 52, item 5): the
"NearID, released weights" row through the float32 forward on the images (a tiny model in the
release's layout, in a mirror), its twin through the profile's int8 token store, and the count of
test decisions the two disagree on."""
from __future__ import annotations

import numpy as np
import pytest

from nearid_lib import metrics
from nearid_lib.config import get_profile
from nearid_lib.models import load_backbone, load_encoder
from nearid_lib.models.registry import RELEASE_REPO
from nearid_lib.nearid.evaluate import evaluate_encoder
from nearid_lib.features.profile_encoders import release_embedders
from nearid_lib.nearid.release import RELEASE_FLOAT, RELEASE_INT8, decision_diff, release_why
from nearid_lib.nearid.scorers import EmbeddingBenchEncoder


def test_release_rows_float_forward_and_int8_twin(smoke_world, tmp_path, monkeypatch):
    from tools.paper_fixtures.nearid import _save_release, _save_siglip2

    hub = tmp_path / "hub"
    monkeypatch.setenv("NEARID_HUB_DIR", str(hub))
    monkeypatch.setenv("NEARID_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("NEARID_SET", raising=False)
    hub.mkdir()
    assert "not in the local hub mirror" in release_why()
    cfg = get_profile("paper", overrides={"backbone.image_size": 32, "backbone.batch_size": 8})
    assert release_embedders(cfg, smoke_world)[0] == []
    _save_release(hub / "Aleksandar" / "nearid-siglip2", _save_siglip2(hub / "google" / "siglip2-so400m-patch14-384"))
    assert release_why() is None
    data = smoke_world
    backbone = load_backbone(cfg)[0]
    embs, why = release_embedders(cfg, data, backbone)
    assert why is None and [e.name for e in embs] == [RELEASE_FLOAT, RELEASE_INT8]
    assert embs[0].layout == "rows" and "float32 forward" in embs[0].label
    # the twin: the released head put on the profile's backbone object by the factory (no second tower)
    assert embs[1].layout == "grids" and embs[1].encoder.backbone is backbone
    assert embs[1].encoder.head is embs[0].encoder.head
    encs = [EmbeddingBenchEncoder(e) for e in embs]
    assert encs[1].same_tower and "int8 token store" in encs[1].label    # the release's tower is google's
    # a profile that scores in float has one path only
    assert [e.name for e in release_embedders(get_profile("smoke"), data, backbone)[0]] == [RELEASE_FLOAT]
    srcs = list(data.sources[:2])               # two sources keep the test short; every one takes the same path
    res = {e.name: evaluate_encoder(e, data, "test", ("full",), sources=srcs) for e in encs}

    # the float row is the released model's own float32 forward on the images, computed by hand
    model = load_encoder("nearid", checkpoint=RELEASE_REPO, dtype="float32")[0].eval()
    pos = data.positives[data.positives["split"] == "test"]
    src = data.sources[0]
    dist = data.distractors[src][data.positives["split"] == "test"]

    def emb(cells):
        out = np.full((len(cells), 3, model.embed_dim), np.nan)
        for (n, k), rel in np.ndenumerate(cells):
            if rel:
                out[n, k] = model.embed([data.image(rel)]).numpy()[0]
        return out

    ps, ds = metrics.nearid_similarities(emb(pos[["img1", "img2", "img3"]].to_numpy()),
                                         emb(dist[["nimg1", "nimg2", "nimg3"]].to_numpy()))
    want = metrics.ssr_pa(ps, ds)
    got = res[RELEASE_FLOAT].nearid["full"]["per_source"][src]
    assert (got["n_trials"], got["n_wins"], got["n_overall_wins"]) == (want["n_trials"], want["n_wins"],
                                                                       want["n_overall_wins"])
    # the two paths' decisions, counted (float16 tower + int8 tokens against float32 on the images)
    d = decision_diff(res[RELEASE_FLOAT], res[RELEASE_INT8])
    nearid = d[d["benchmark"] == "nearid"].set_index("source")
    assert list(nearid.index) == srcs and (d["variant"] == "full").all()
    for s in srcs:
        r = res[RELEASE_FLOAT].nearid["full"]["per_source"][s]
        assert nearid.loc[s, "n_trials"] == r["n_trials"] and 0 <= nearid.loc[s, "trials_differ"] <= r["n_trials"]
        assert nearid.loc[s, "ssr_ref"] == pytest.approx(100 * r["ssr"])
    assert "mtg" in set(d["benchmark"])
