"""DreamBooth for SD3 (:mod:`nearid_lib.generate.dreambooth`) on a tiny random-weight
``StableDiffusion3Pipeline`` built offline: training changes the output (full and LoRA), a killed and
resumed run is bit-identical to a straight one, finished runs are reused and re-applied, LoRA saves
only the adapter, a state of another configuration is discarded, prior preservation on and off, a
bf16 pipeline trains fp32 tensors and is handed back in bf16, class images are seeded and resumable."""
from __future__ import annotations

import copy
import json
import time

import numpy as np
import pytest
import torch
from PIL import Image
from safetensors.torch import load_file

from nearid_lib.generate import dreambooth as db
from nearid_lib.generate.dreambooth import (
    LORA_TARGETS,
    RECORD_FILE,
    WEIGHTS_FILE,
    DreamBoothConfig,
    apply_dreambooth,
    base_state,
    class_prompt,
    generate_class_images,
    instance_prompt,
    restore_base,
    train_dreambooth,
)
from tools.tiny_models.pipelines import build_tiny_sd3_pipeline

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def tiny():
    """The tiny SD3 pipeline (no T5) and a snapshot of its base transformer."""
    pipe = build_tiny_sd3_pipeline(seed=0, with_t5=False)
    return pipe, base_state(pipe)


@pytest.fixture
def pipe(tiny):
    """The module's pipeline back at its base weights."""
    p, snap = tiny
    restore_base(p, snap)
    return p


def _images(seed: int, sizes) -> list[Image.Image]:
    rng = np.random.default_rng(seed)
    return [Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)) for w, h in sizes]


INSTANCE = _images(1, [(40, 48), (48, 36), (36, 36)])
CLASS = _images(2, [(32, 40), (44, 32)])


def _cfg(**kw) -> DreamBoothConfig:
    base = {"steps": 5, "lr": 1e-3, "resolution": 32, "lora_rank": 4, "seed": 3}
    return DreamBoothConfig(**(base | kw))


def _render(pipe) -> np.ndarray:
    gen = torch.Generator().manual_seed(0)
    return pipe(instance_prompt("sks", "dog"), height=32, width=32, num_inference_steps=2, generator=gen,
                output_type="np").images[0]


def test_prompts_and_config_defaults():
    assert instance_prompt("sks", "dog") == "a photo of sks dog"
    assert class_prompt("dog") == "a photo of a dog"
    cfg = DreamBoothConfig()
    assert (cfg.steps, cfg.lr, cfg.batch_size, cfg.resolution, cfg.prior_weight, cfg.with_prior, cfg.mode,
            cfg.lora_rank, cfg.token, cfg.checkpoint_every, cfg.mixed_precision) == (
        800, 5e-6, 1, 768, 0.5, True, "full", 16, "sks", 0, "bf16")
    with pytest.raises(ValueError):
        DreamBoothConfig(mode="dora")


@pytest.mark.parametrize("mode", ["full", "lora"])
def test_training_changes_the_output_and_restore_base_undoes_it(pipe, tiny, tmp_path, mode):
    base = _render(pipe)
    res = train_dreambooth(pipe, INSTANCE, "dog", CLASS, _cfg(steps=4, mode=mode), tmp_path, progress=False)
    assert res.finished and res.steps == 4 and res.resumed_from == 0 and len(res.history) == 4
    assert not any(p.requires_grad for p in pipe.transformer.parameters())
    assert not pipe.transformer.training
    assert np.abs(_render(pipe) - base).max() > 1e-4
    restore_base(pipe, tiny[1])
    assert np.array_equal(_render(pipe), base)


@pytest.mark.parametrize("mode", ["full", "lora"])
def test_killed_and_resumed_run_is_bit_identical(pipe, tiny, tmp_path, mode):
    cfg = _cfg(mode=mode, checkpoint_every=2)
    straight = train_dreambooth(pipe, INSTANCE, "dog", CLASS, cfg, tmp_path / "a", progress=False)
    restore_base(pipe, tiny[1])
    killed = train_dreambooth(pipe, INSTANCE, "dog", CLASS, cfg, tmp_path / "b", stop_after=3, progress=False)
    assert not killed.finished and killed.steps == 3 and not (tmp_path / "b" / WEIGHTS_FILE).exists()
    assert [p.name for p in (tmp_path / "b" / "resume").iterdir()] == ["step_0000002"]
    restore_base(pipe, tiny[1])                   # a fresh process: the base pipeline again
    resumed = train_dreambooth(pipe, INSTANCE, "dog", CLASS, cfg, tmp_path / "b", progress=False)
    assert resumed.finished and resumed.resumed_from == 2
    assert resumed.history == straight.history
    a, b = load_file(str(tmp_path / "a" / WEIGHTS_FILE)), load_file(str(tmp_path / "b" / WEIGHTS_FILE))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert not (tmp_path / "b" / "resume").exists()


def test_finished_run_is_reused_and_reapplied(pipe, tiny, tmp_path, monkeypatch):
    cfg = _cfg(steps=3)
    first = train_dreambooth(pipe, INSTANCE, "dog", CLASS, cfg, tmp_path, progress=False)
    trained = _render(pipe)
    rec = json.loads((tmp_path / RECORD_FILE).read_text())
    assert rec["steps"] == 3 and rec["history"] == first.history and rec["config"]["mode"] == "full"
    restore_base(pipe, tiny[1])
    monkeypatch.setattr(db, "_step_losses", lambda *a, **k: pytest.fail("a finished run was retrained"))
    t0 = time.time()
    again = train_dreambooth(pipe, INSTANCE, "dog", CLASS, cfg, tmp_path, progress=False)
    assert again.finished and again.resumed_from == again.steps == 3 and again.history == first.history
    assert time.time() - t0 < 5
    assert np.array_equal(_render(pipe), trained)        # the second call loaded the weights
    restore_base(pipe, tiny[1])
    assert not np.array_equal(_render(pipe), trained)
    apply_dreambooth(pipe, tmp_path)
    assert np.array_equal(_render(pipe), trained)


def test_lora_saves_only_the_adapter(pipe, tiny, tmp_path):
    res = train_dreambooth(pipe, INSTANCE, "dog", CLASS, _cfg(steps=2, mode="lora"), tmp_path / "lora",
                           progress=False)
    trained = _render(pipe)
    lora = load_file(str(res.weights))
    assert lora and all(".lora_A." in k or ".lora_B." in k for k in lora)
    assert {k.split(".lora_")[0].split(".attn.")[1] for k in lora} == set(LORA_TARGETS)
    assert all(t.shape[0] == 4 or t.shape[1] == 4 for t in lora.values())      # rank 4
    restore_base(pipe, tiny[1])
    full = train_dreambooth(pipe, INSTANCE, "dog", CLASS, _cfg(steps=2), tmp_path / "full", progress=False)
    assert set(load_file(str(full.weights))) == {n for n, _ in pipe.transformer.named_parameters()}
    assert res.weights.stat().st_size * 5 < full.weights.stat().st_size
    restore_base(pipe, tiny[1])
    apply_dreambooth(pipe, tmp_path / "lora")
    assert np.array_equal(_render(pipe), trained)


def test_state_of_another_config_is_discarded(pipe, tiny, tmp_path):
    old = _cfg(checkpoint_every=2)
    train_dreambooth(pipe, INSTANCE, "dog", CLASS, old, tmp_path / "run", stop_after=3, progress=False)
    assert (tmp_path / "run" / "resume" / "step_0000002").exists()
    new = _cfg(checkpoint_every=2, lr=5e-4)
    restore_base(pipe, tiny[1])
    res = train_dreambooth(pipe, INSTANCE, "dog", CLASS, new, tmp_path / "run", progress=False)
    assert res.finished and res.resumed_from == 0
    restore_base(pipe, tiny[1])
    ref = train_dreambooth(pipe, INSTANCE, "dog", CLASS, new, tmp_path / "ref", progress=False)
    assert res.history == ref.history
    with pytest.raises(ValueError, match="another configuration"):    # a finished run of another config
        train_dreambooth(pipe, INSTANCE, "dog", CLASS, old, tmp_path / "run", progress=False)


def test_prior_preservation_on_and_off(pipe, tiny, tmp_path):
    on = train_dreambooth(pipe, INSTANCE, "dog", CLASS, _cfg(steps=3), None, progress=False)
    assert all({"instance", "class", "loss"} <= set(h) for h in on.history)
    assert all(h["loss"] == pytest.approx(h["instance"] + 0.5 * h["class"], rel=1e-6) for h in on.history)
    restore_base(pipe, tiny[1])
    off = train_dreambooth(pipe, INSTANCE, "dog", None, _cfg(steps=3, with_prior=False), tmp_path,
                           progress=False)
    assert off.finished and all("class" not in h and h["loss"] == h["instance"] for h in off.history)
    with pytest.raises(ValueError, match="class images"):
        train_dreambooth(pipe, INSTANCE, "dog", None, _cfg(), None, progress=False)


@pytest.mark.parametrize("mode", ["full", "lora"])
def test_bf16_pipeline_trains_fp32_tensors_and_stays_bf16(pipe, tmp_path, mode):
    half = copy.deepcopy(pipe).to(torch.bfloat16)
    base = _render(half)
    res = train_dreambooth(half, INSTANCE, "dog", None, _cfg(steps=2, mode=mode, with_prior=False), tmp_path,
                           progress=False)
    assert {t.dtype for t in load_file(str(res.weights)).values()} == {torch.float32}
    assert {p.dtype for p in half.transformer.parameters()} == {torch.bfloat16}
    assert np.abs(_render(half) - base).max() > 0


def test_generate_class_images_is_seeded_and_resumable(pipe, tmp_path):
    kw = {"height": 32, "width": 32, "num_inference_steps": 2}
    paths = generate_class_images(pipe, "dog", 2, 7, tmp_path, **kw)
    assert [p.name for p in paths] == ["class_0000.png", "class_0001.png"]
    assert Image.open(paths[0]).size == (32, 32)
    first = paths[0].read_bytes()
    stamps = [p.stat().st_mtime_ns for p in paths]
    paths[0].unlink()
    more = generate_class_images(pipe, "dog", 3, 7, tmp_path, **kw)
    assert len(more) == 3 and more[0].read_bytes() == first                 # same seed, same image
    assert more[1].stat().st_mtime_ns == stamps[1]                          # kept, not remade
    assert not list(tmp_path.glob(".*"))                                    # no temporary leftovers


@pytest.mark.parametrize("mode", ["full", "lora"])
def test_gradient_checkpointing_changes_memory_not_weights(pipe, tiny, tmp_path, mode):
    """Recomputing the blocks' activations in the backward pass (the default, so a full run fits an
    A100-40GB) gives the same losses and weights bit for bit on the CPU as keeping them, leaves the
    transformer without checkpointing afterwards, and does not change the run's key."""
    on, off = _cfg(steps=3, mode=mode), _cfg(steps=3, mode=mode, gradient_checkpointing=False)
    assert on.gradient_checkpointing and db.run_key(pipe, INSTANCE, "dog", CLASS, on) == db.run_key(
        pipe, INSTANCE, "dog", CLASS, off)
    a = train_dreambooth(pipe, INSTANCE, "dog", CLASS, on, tmp_path / "on", progress=False)
    assert not pipe.transformer.is_gradient_checkpointing
    restore_base(pipe, tiny[1])
    b = train_dreambooth(pipe, INSTANCE, "dog", CLASS, off, tmp_path / "off", progress=False)
    assert a.history == b.history
    wa, wb = load_file(str(a.weights)), load_file(str(b.weights))
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


def test_text_encoders_stay_where_they_are_on_the_cpu(pipe):
    """Parking the text encoders is for a CUDA run only: on the CPU nothing moves."""
    assert db._park_text_encoders(pipe, torch.device("cpu")) == []
    assert all(next(m.parameters()).device.type == "cpu" for m in db._text_encoders(pipe))
