"""Tiny real SDXL (+ IP-Adapter plain/plus loaded from disk), SD3, FLUX Kontext and FLUX Fill
pipelines built offline: production classes, tiny calls, seed determinism, offline T5 tokenizer."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from tools.tiny_models.pipelines import (
    IP_ADAPTER_WEIGHT_NAMES,
    build_tiny_flux_fill_pipeline,
    build_tiny_flux_kontext_pipeline,
    build_tiny_sd3_pipeline,
    build_tiny_sdxl_pipeline,
    t5_tokenizer_offline,
    tiny_ip_adapter_state_dict,
    write_tiny_ip_adapter,
)

torch.set_num_threads(1)

SIZE = 32
STEPS = 2


def _img(seed=0, size=SIZE):
    return Image.fromarray((np.random.default_rng(seed).random((size, size, 3)) * 255).astype(np.uint8))


def _mask(size=SIZE):
    m = np.zeros((size, size), np.uint8)
    m[size // 4:3 * size // 4, size // 4:3 * size // 4] = 255
    return Image.fromarray(m, "L")


def _pixels(img):
    return np.asarray(img, dtype=np.int16)


# name -> (builder, production class name, call kwargs for a tiny call)
CASES = {
    "sdxl": (build_tiny_sdxl_pipeline, "StableDiffusionXLPipeline", {}),
    "sd3": (build_tiny_sd3_pipeline, "StableDiffusion3Pipeline", {}),
    "sd3_no_t5": (lambda: build_tiny_sd3_pipeline(with_t5=False), "StableDiffusion3Pipeline", {}),
    "flux_kontext": (build_tiny_flux_kontext_pipeline, "FluxKontextPipeline",
                     {"image": _img(5), "max_area": SIZE * SIZE, "_auto_resize": False}),
    "flux_fill": (build_tiny_flux_fill_pipeline, "FluxFillPipeline",
                  {"image": _img(5), "mask_image": _mask()}),
}


@pytest.fixture(scope="module")
def pipes():
    return {}


def _get(pipes, name):
    if name not in pipes:
        pipes[name] = CASES[name][0]()
    return pipes[name]


def _run(pipe, name, seed, **extra):
    kwargs = dict(CASES[name][2], **extra)
    out = pipe(prompt="a photo of a cat", height=SIZE, width=SIZE, num_inference_steps=STEPS,
               generator=torch.Generator().manual_seed(seed), **kwargs)
    return out.images[0]


@pytest.mark.parametrize("name", sorted(CASES))
def test_tiny_pipeline_is_production_class_and_seed_deterministic(pipes, name):
    import diffusers

    pipe = _get(pipes, name)
    assert type(pipe) is getattr(diffusers, CASES[name][1])
    a = _run(pipe, name, 0)
    assert isinstance(a, Image.Image) and a.size == (SIZE, SIZE)
    b = _run(pipe, name, 0)
    c = _run(pipe, name, 1)
    assert np.array_equal(_pixels(a), _pixels(b))
    assert not np.array_equal(_pixels(a), _pixels(c))


def test_sd3_text_encoder_3_presence(pipes):
    from transformers import T5EncoderModel

    assert isinstance(_get(pipes, "sd3").text_encoder_3, T5EncoderModel)
    no_t5 = _get(pipes, "sd3_no_t5")
    assert no_t5.text_encoder_3 is None and no_t5.tokenizer_3 is None


def test_flux_fill_transformer_width_matches_conditioning(pipes):
    pipe = _get(pipes, "flux_fill")
    lat = pipe.vae.config.latent_channels
    factor = pipe.vae_scale_factor
    assert pipe.transformer.config.in_channels == 2 * 4 * lat + 4 * factor * factor
    assert pipe.transformer.config.out_channels == 4 * lat


def test_same_seed_same_weights_and_global_rng_untouched():
    state = torch.random.get_rng_state()
    a = build_tiny_flux_fill_pipeline(seed=3).transformer.state_dict()
    assert torch.equal(torch.random.get_rng_state(), state)
    b = build_tiny_flux_fill_pipeline(seed=3).transformer.state_dict()
    c = build_tiny_flux_fill_pipeline(seed=4).transformer.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], c[k]) for k in a)


def test_t5_tokenizer_offline_round_trips_and_pads():
    from transformers import T5TokenizerFast

    tok = t5_tokenizer_offline()
    assert isinstance(tok, T5TokenizerFast) and tok.model_max_length == 512
    assert (tok.pad_token_id, tok.eos_token_id, tok.unk_token_id) == (0, 1, 2)
    prompt = "A photo of a cat, 2 ears!"
    enc = tok(prompt, padding="max_length", max_length=512, truncation=True, return_tensors="pt")
    ids = enc.input_ids[0]
    assert ids.shape == (512,)
    n = int(enc.attention_mask[0].sum())
    assert ids[n - 1] == 1 and (ids[n:] == 0).all() and (ids[:n - 1] > 2).all()
    assert tok.decode(ids, skip_special_tokens=True) == prompt
    long = tok(["x " * 100], padding="max_length", max_length=16, truncation=True,
               return_tensors="pt").input_ids
    assert long.shape == (1, 16) and long[0, -1] == 1
    assert tok.batch_decode(long[:, :-1])[0].split() == ["x"] * 15   # one "▁x" piece per word
    assert t5_tokenizer_offline().get_vocab() == tok.get_vocab()


@pytest.mark.parametrize("plus", [False, True])
def test_ip_adapter_state_dict_layout(pipes, plus):
    pipe = _get(pipes, "sdxl")
    sd = tiny_ip_adapter_state_dict(pipe, plus=plus)
    assert set(sd) == {"image_proj", "ip_adapter"}
    n_cross = sum(not k.endswith("attn1.processor") for k in pipe.unet.attn_processors)
    assert sorted(sd["ip_adapter"]) == sorted(
        f"{2 * i + 1}.to_{kv}_ip.weight" for i in range(n_cross) for kv in "kv")
    cross = pipe.unet.config.cross_attention_dim
    enc = pipe.image_encoder.config
    proj = sd["image_proj"]
    if plus:
        assert proj["proj_in.weight"].shape[1] == enc.hidden_size
        assert proj["proj_out.weight"].shape[0] == cross and "layers.3.1.3.weight" in proj
    else:
        assert set(proj) == {"proj.weight", "proj.bias", "norm.weight", "norm.bias"}
        assert proj["proj.weight"].shape == (4 * cross, enc.projection_dim)
    again = tiny_ip_adapter_state_dict(pipe, plus=plus)
    assert all(torch.equal(proj[k], again["image_proj"][k]) for k in proj)


@pytest.mark.parametrize("plus", [False, True])
def test_sdxl_ip_adapter_loads_from_file_and_changes_output(pipes, tmp_path, plus):
    from diffusers.models.embeddings import (
        ImageProjection,
        IPAdapterPlusImageProjection,
    )
    from safetensors import safe_open

    base = _run(_get(pipes, "sdxl"), "sdxl", 0)
    pipe = build_tiny_sdxl_pipeline()          # same weights as the cached one; gets modified
    path = write_tiny_ip_adapter(tmp_path, pipe, plus=plus)
    assert path == tmp_path / "sdxl_models" / IP_ADAPTER_WEIGHT_NAMES[plus]
    with safe_open(str(path), framework="pt") as f:
        assert {k.split(".")[0] for k in f.keys()}  # noqa: SIM118 (safe_open is not a dict) == {"image_proj", "ip_adapter"}
    pipe.load_ip_adapter(str(tmp_path), subfolder="sdxl_models", weight_name=path.name,
                         image_encoder_folder=None)
    pipe.set_ip_adapter_scale(0.6)
    layer = pipe.unet.encoder_hid_proj.image_projection_layers[0]
    assert type(layer) is (IPAdapterPlusImageProjection if plus else ImageProjection)
    out = _run(pipe, "sdxl", 0, ip_adapter_image=_img(7))
    assert out.size == (SIZE, SIZE)
    assert not np.array_equal(_pixels(out), _pixels(base))
    again = _run(pipe, "sdxl", 0, ip_adapter_image=_img(7))
    assert np.array_equal(_pixels(out), _pixels(again))
