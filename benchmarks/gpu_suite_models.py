"""The models of the GPU suite at their real sizes, built in code with random weights (no download),
and tiny configurations of the same classes for ``--tiny``.

Every real number below is a field of the model's published ``config.json`` (or the diffusers
folder's ``<component>/config.json``); :data:`SOURCES` says where each was read. The builders make
the models **on the device, in the measured dtype**: parameters are allocated and randomly
initialised there (:func:`on_device`), so tens of billions of parameters take seconds instead of
the minutes a CPU init and a copy would, and nothing passes through host memory. The tokenizers are
the offline ones the library builds for its tiny pipelines (CLIP: the real BPE vocabulary of
open_clip; T5: a character vocabulary; Qwen: a byte-level BPE trained on the judge prompt): ids
below every real vocabulary, so the embedding tables keep their real sizes.
"""
from __future__ import annotations

import contextlib
from typing import Any

import torch

# ----------------------------------------------------------------------------- where the numbers come from
SOURCES = {
    "siglip2_so400m": "google/siglip2-so400m-patch14-384 config.json (vision tower; the same geometry as "
                      "benchmarks/paper_scale_parts.P, measured at 670 GFLOP/img on the H100 run of 2026-11-24)",
    "clipseg": "CIDAS/clipseg-rd64-refined: transformers' CLIPSegConfig defaults are CIDAS/clipseg-rd64's "
               "(its docstring), the refined checkpoint adds use_complex_transposed_convolution; 352 px "
               "input as its preprocessor_config.json (nearid_lib/data/masks.py)",
    "qwen3vl_30b": "Qwen/Qwen3-VL-30B-A3B-Instruct config.json (hub commit 1fc78ad), as transcribed in two public "
                   "ports read with the search tools (a Megatron MODEL_ARGS list and a config-parser test); "
                   "preprocessor_config.json: patch 16, merge 2, temporal 2, shortest_edge 65536, "
                   "longest_edge 16777216, mean/std 0.5",
    "sdxl": "stabilityai/stable-diffusion-xl-base-1.0 unet/, vae/, text_encoder/ (CLIP ViT-L/14 text), "
            "text_encoder_2/ (OpenCLIP ViT-bigG/14 text), scheduler/ config.json",
    "ip_adapter": "h94/IP-Adapter sdxl_models/image_encoder (OpenCLIP ViT-bigG/14 vision, for "
                  "ip-adapter_sdxl) and models/image_encoder (ViT-H/14 vision, for ip-adapter-plus_sdxl_vit-h) "
                  "config.json; the adapter weights are laid out by tools.tiny_models.pipelines from "
                  "these configs (its Resampler is 2048 wide where the release's is 1280: < 1% of a step)",
    "flux": "black-forest-labs/FLUX.1-Kontext-dev and FLUX.1-Fill-dev transformer/ (19 double + 38 single "
            "blocks, 3072 wide; Fill: 384 input channels), vae/, text_encoder/ (CLIP ViT-L/14 text), "
            "text_encoder_2/ (T5 v1.1 XXL encoder) config.json",
    "sd3": "stabilityai/stable-diffusion-3-medium-diffusers transformer/ (24 joint blocks, 1536 wide), vae/, "
           "text_encoder/ (CLIP-L), text_encoder_2/ (CLIP-bigG), text_encoder_3/ (T5 v1.1 XXL) config.json",
}

# published parameter counts (model cards, rounded) the configurations must reproduce (tests/test_gpu_suite.py)
PUBLISHED_PARAMS = {"siglip2_so400m": 0.43e9, "qwen3vl_30b": 31.1e9, "flux_transformer": 11.9e9,
                    "t5_xxl_encoder": 4.76e9, "sd3_transformer": 2.03e9, "sdxl_unet": 2.57e9}

# ----------------------------------------------------------------------------- sizes
_CLIP_L_TEXT = dict(vocab_size=49408, hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
                    num_attention_heads=12, max_position_embeddings=77, projection_dim=768,
                    hidden_act="quick_gelu", bos_token_id=49406, eos_token_id=49407, pad_token_id=49407)
_CLIP_G_TEXT = dict(_CLIP_L_TEXT, hidden_size=1280, intermediate_size=5120, num_hidden_layers=32,
                    num_attention_heads=20, projection_dim=1280, hidden_act="gelu")
_T5_XXL = dict(vocab_size=32128, d_model=4096, d_kv=64, d_ff=10240, num_layers=24, num_heads=64,
               relative_attention_num_buckets=32, relative_attention_max_distance=128,
               feed_forward_proj="gated-gelu", dropout_rate=0.0, decoder_start_token_id=0, pad_token_id=0,
               eos_token_id=1)
_VAE = dict(in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 4,
            up_block_types=("UpDecoderBlock2D",) * 4, block_out_channels=(128, 256, 512, 512),
            layers_per_block=2, sample_size=1024)
_TINY_TEXT = dict(vocab_size=49408, hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                  num_attention_heads=4, max_position_embeddings=77, projection_dim=32, bos_token_id=49406,
                  eos_token_id=49407, pad_token_id=49407)
_TINY_T5 = dict(vocab_size=200, d_model=64, d_kv=8, d_ff=37, num_layers=2, num_heads=4,
                relative_attention_num_buckets=8, relative_attention_max_distance=32, dropout_rate=0.0,
                decoder_start_token_id=0, pad_token_id=0, eos_token_id=1)
_TINY_VAE = dict(_VAE, block_out_channels=(8, 16, 16, 16), layers_per_block=1, norm_num_groups=8, sample_size=64)

PAPER = {
    "siglip": dict(hidden_size=1152, intermediate_size=4304, num_hidden_layers=27, num_attention_heads=16,
                   image_size=384, patch_size=14),
    "clipseg": dict(config={"use_complex_transposed_convolution": True}, input_px=352),
    "qwen": dict(text=dict(vocab_size=151936, hidden_size=2048, intermediate_size=6144, moe_intermediate_size=768,
                           num_experts=128, num_experts_per_tok=8, num_hidden_layers=48, num_attention_heads=32,
                           num_key_value_heads=4, head_dim=128, decoder_sparse_step=1, norm_topk_prob=True,
                           rms_norm_eps=1e-6, max_position_embeddings=262144,
                           rope_parameters={"rope_type": "default", "rope_theta": 5e6, "mrope_section": [24, 20, 20],
                                            "mrope_interleaved": True}),
                 vision=dict(depth=27, hidden_size=1152, intermediate_size=4304, num_heads=16, patch_size=16,
                             spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=2048,
                             num_position_embeddings=2304, deepstack_visual_indexes=[8, 16, 24],
                             hidden_act="gelu_pytorch_tanh"),
                 max_image_px=4096),       # longest_edge 16777216 = 4096^2 pixels: NearID's 512 px views pass as they are
    "sdxl_unet": dict(sample_size=128, in_channels=4, out_channels=4, block_out_channels=(320, 640, 1280),
                      layers_per_block=2, transformer_layers_per_block=(1, 2, 10), attention_head_dim=(5, 10, 20),
                      cross_attention_dim=2048, use_linear_projection=True, addition_embed_type="text_time",
                      addition_time_embed_dim=256, projection_class_embeddings_input_dim=2816,
                      down_block_types=("DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"),
                      up_block_types=("CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D")),
    "sdxl_vae": dict(_VAE, latent_channels=4, scaling_factor=0.13025),
    "clip_l_text": _CLIP_L_TEXT, "clip_g_text": _CLIP_G_TEXT, "t5": _T5_XXL,
    "ipa_vit_g": dict(hidden_size=1664, intermediate_size=8192, num_hidden_layers=48, num_attention_heads=16,
                      patch_size=14, image_size=224, projection_dim=1280, hidden_act="gelu"),
    "ipa_vit_h": dict(hidden_size=1280, intermediate_size=5120, num_hidden_layers=32, num_attention_heads=16,
                      patch_size=14, image_size=224, projection_dim=1024, hidden_act="gelu"),
    "flux": dict(patch_size=1, out_channels=64, num_layers=19, num_single_layers=38, attention_head_dim=128,
                 num_attention_heads=24, joint_attention_dim=4096, pooled_projection_dim=768, guidance_embeds=True,
                 axes_dims_rope=(16, 56, 56)),
    "flux_vae": dict(_VAE, latent_channels=16, scaling_factor=0.3611, shift_factor=0.1159, use_quant_conv=False,
                     use_post_quant_conv=False),
    "sd3": dict(sample_size=128, patch_size=2, in_channels=16, num_layers=24, attention_head_dim=64,
                num_attention_heads=24, joint_attention_dim=4096, caption_projection_dim=1536,
                pooled_projection_dim=2048, out_channels=16, pos_embed_max_size=192),
    "sd3_vae": dict(_VAE, latent_channels=16, scaling_factor=1.5305, shift_factor=0.0609, use_quant_conv=False,
                    use_post_quant_conv=False),
}

TINY = {
    "siglip": dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, image_size=32,
                   patch_size=8),
    "clipseg": dict(config=dict(text_config=dict(_TINY_TEXT, num_attention_heads=4),
                                # vision at 32 px fed 64 px: the real model's 224 -> 352 position interpolation
                                vision_config=dict(hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                                                   num_attention_heads=4, image_size=32, patch_size=16),
                                projection_dim=32, extract_layers=(0, 1), reduce_dim=16,
                                decoder_num_attention_heads=2, decoder_intermediate_size=32,
                                use_complex_transposed_convolution=True), input_px=64),
    "qwen": dict(text=dict(vocab_size=1000, hidden_size=32, intermediate_size=64, moe_intermediate_size=16,
                           num_experts=4, num_experts_per_tok=2, num_hidden_layers=2, num_attention_heads=2,
                           num_key_value_heads=1, head_dim=16, decoder_sparse_step=1, norm_topk_prob=True,
                           max_position_embeddings=4096,
                           rope_parameters={"rope_type": "default", "rope_theta": 5e6, "mrope_section": [2, 3, 3],
                                            "mrope_interleaved": True}),
                 vision=dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=16,
                             spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=32,
                             num_position_embeddings=64, deepstack_visual_indexes=[1]),
                 max_image_px=64),
    "sdxl_unet": dict(sample_size=8, in_channels=4, out_channels=4, block_out_channels=(32, 64), layers_per_block=1,
                      transformer_layers_per_block=(1, 1), attention_head_dim=(2, 4), cross_attention_dim=64,
                      use_linear_projection=True, addition_embed_type="text_time", addition_time_embed_dim=8,
                      projection_class_embeddings_input_dim=6 * 8 + 32, norm_num_groups=8,
                      down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
                      up_block_types=("CrossAttnUpBlock2D", "UpBlock2D")),
    "sdxl_vae": dict(_TINY_VAE, latent_channels=4, scaling_factor=0.13025),
    "clip_l_text": _TINY_TEXT, "clip_g_text": _TINY_TEXT, "t5": _TINY_T5,
    "ipa_vit_g": dict(hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=4, patch_size=8,
                      image_size=32, projection_dim=32),
    "ipa_vit_h": dict(hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=4, patch_size=8,
                      image_size=32, projection_dim=32),
    "flux": dict(patch_size=1, out_channels=64, num_layers=1, num_single_layers=1, attention_head_dim=16,
                 num_attention_heads=2, joint_attention_dim=64, pooled_projection_dim=32, guidance_embeds=True,
                 axes_dims_rope=(4, 6, 6)),
    "flux_vae": dict(_TINY_VAE, latent_channels=16, scaling_factor=0.3611, shift_factor=0.1159, use_quant_conv=False,
                     use_post_quant_conv=False),
    "sd3": dict(sample_size=8, patch_size=2, in_channels=16, num_layers=2, attention_head_dim=8, num_attention_heads=4,
                joint_attention_dim=64, caption_projection_dim=32, pooled_projection_dim=64, out_channels=16,
                pos_embed_max_size=32),
    "sd3_vae": dict(_TINY_VAE, latent_channels=16, scaling_factor=1.5305, shift_factor=0.0609, use_quant_conv=False,
                    use_post_quant_conv=False),
}


def sizes(tiny: bool) -> dict:
    """The size table of the mode: :data:`TINY` or :data:`PAPER`."""
    return TINY if tiny else PAPER


# ----------------------------------------------------------------------------- building on the device
@contextlib.contextmanager
def on_device(dev: torch.device, dtype: torch.dtype):
    """Modules constructed inside get their parameters on ``dev`` in ``dtype`` and are initialised
    there (torch's default device and dtype, restored afterwards; the RNG is seeded for repeatability).
    Build nothing else inside: every tensor made here lands on ``dev`` in ``dtype``."""
    old = torch.get_default_dtype()
    torch.manual_seed(0)
    torch.set_default_dtype(dtype)
    try:
        with torch.device(dev):
            yield
    finally:
        torch.set_default_dtype(old)


def n_params(module) -> int:
    """Parameters of a module (or of every module component of a diffusers pipeline)."""
    if isinstance(module, torch.nn.Module):
        return sum(p.numel() for p in module.parameters())
    return sum(n_params(m) for m in getattr(module, "components", {}).values() if isinstance(m, torch.nn.Module))


def _eval(*mods):
    # constructors leave modules in training mode (T5 would apply dropout): eval, as from_pretrained leaves them
    for m in mods:
        if isinstance(m, torch.nn.Module):
            m.eval().requires_grad_(False)


def clip_text(spec: dict, projection: bool):
    """A CLIP text encoder (``CLIPTextModelWithProjection`` when ``projection``)."""
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection

    return (CLIPTextModelWithProjection if projection else CLIPTextModel)(CLIPTextConfig(**spec))


def t5_encoder(spec: dict):
    """The T5 v1.1 encoder of FLUX and SD3."""
    from transformers import T5Config, T5EncoderModel

    return T5EncoderModel(T5Config(**spec))


def vae(spec: dict):
    """An ``AutoencoderKL`` (downsampling factor 8)."""
    from diffusers import AutoencoderKL

    return AutoencoderKL(**spec)


def qwen3vl_judge(S: dict, prompt: str, dev: torch.device, dtype: torch.dtype):
    """``(model, processor)``: ``Qwen3VLMoeForConditionalGeneration`` of ``S["qwen"]`` on ``dev`` and a
    processor whose image settings match the release's for the suite's images (the library's offline
    Qwen3-VL processor, its pixel bound at ``max_image_px``); special-token ids are the offline tokenizer's."""
    from transformers import Qwen3VLMoeConfig, Qwen3VLMoeForConditionalGeneration

    from nearid_lib.judge.model import build_tiny_qwen3vl

    q = S["qwen"]
    proc = build_tiny_qwen3vl(image_px=q["max_image_px"], extra_text=prompt)[1]
    tok = proc.tokenizer
    ids = {k: tok.convert_tokens_to_ids(f"<|{k}|>") for k in ("image_pad", "video_pad", "vision_start",
                                                              "vision_end", "im_end", "endoftext")}
    cfg = Qwen3VLMoeConfig(text_config=dict(q["text"], eos_token_id=ids["im_end"], pad_token_id=ids["endoftext"]),
                           vision_config=q["vision"], image_token_id=ids["image_pad"],
                           video_token_id=ids["video_pad"], vision_start_token_id=ids["vision_start"],
                           vision_end_token_id=ids["vision_end"], tie_word_embeddings=False)
    with on_device(dev, dtype):
        model = Qwen3VLMoeForConditionalGeneration(cfg)
    _eval(model)
    return model, proc


# Only modules are built inside on_device: schedulers, tokenizers and processors make CPU tensors and
# numpy arrays of their own (a scheduler's betas in bf16 on the GPU would be wrong, and some go
# through numpy), so they are built outside it.
def sdxl_pipeline(S: dict, encoder: str, dev: torch.device, dtype: torch.dtype):
    """``StableDiffusionXLPipeline`` with the IP-Adapter image encoder ``encoder`` (``ipa_vit_g`` or
    ``ipa_vit_h``) and its ``CLIPImageProcessor``, ready for ``load_ip_adapter(..., image_encoder_folder=None)``."""
    from diffusers import EulerDiscreteScheduler, StableDiffusionXLPipeline, UNet2DConditionModel
    from transformers import CLIPImageProcessor, CLIPVisionConfig, CLIPVisionModelWithProjection

    from nearid_lib.generate.tiny_sd import clip_tokenizer_offline

    with on_device(dev, dtype):
        parts = dict(unet=UNet2DConditionModel(**S["sdxl_unet"]), vae=vae(S["sdxl_vae"]),
                     text_encoder=clip_text(S["clip_l_text"], False), text_encoder_2=clip_text(S["clip_g_text"], True),
                     image_encoder=CLIPVisionModelWithProjection(CLIPVisionConfig(**S[encoder])))
    _eval(*parts.values())
    px = S[encoder]["image_size"]
    sched = EulerDiscreteScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
                                   timestep_spacing="leading", steps_offset=1)
    pipe = StableDiffusionXLPipeline(**parts, tokenizer=clip_tokenizer_offline(), tokenizer_2=clip_tokenizer_offline(),
                                     scheduler=sched, add_watermarker=False,
                                     feature_extractor=CLIPImageProcessor(size={"shortest_edge": px},
                                                                          crop_size={"height": px, "width": px}))
    pipe.set_progress_bar_config(disable=True)
    return pipe


def flux_text(S: dict, dev: torch.device, dtype: torch.dtype) -> dict:
    """FLUX.1's text stack and VAE (shared by Kontext and Fill): CLIP-L, T5-XXL, their tokenizers,
    the VAE and the dynamically shifted flow-matching scheduler."""
    from diffusers import FlowMatchEulerDiscreteScheduler

    from tools.tiny_models.pipelines import t5_tokenizer_offline
    from nearid_lib.generate.tiny_sd import clip_tokenizer_offline

    with on_device(dev, dtype):
        parts = dict(text_encoder=clip_text(S["clip_l_text"], False), text_encoder_2=t5_encoder(S["t5"]),
                     vae=vae(S["flux_vae"]))
    _eval(*parts.values())
    sched = FlowMatchEulerDiscreteScheduler(shift=3.0, use_dynamic_shifting=True, base_shift=0.5, max_shift=1.15,
                                            base_image_seq_len=256, max_image_seq_len=4096)
    return dict(parts, tokenizer=clip_tokenizer_offline(), tokenizer_2=t5_tokenizer_offline(), scheduler=sched)


def flux_pipeline(S: dict, text: dict, fill: bool, dev: torch.device, dtype: torch.dtype):
    """``FluxFillPipeline`` (``fill``) or ``FluxKontextPipeline`` over the shared ``text`` stack; Fill's
    transformer reads packed latents + masked-image latents + the packed mask (384 channels)."""
    from diffusers import FluxFillPipeline, FluxKontextPipeline, FluxTransformer2DModel

    packed = 4 * S["flux_vae"]["latent_channels"]
    cin = 2 * packed + 4 * 8 * 8 if fill else packed
    with on_device(dev, dtype):
        tr = FluxTransformer2DModel(in_channels=cin, **S["flux"])
    _eval(tr)
    pipe = (FluxFillPipeline if fill else FluxKontextPipeline)(transformer=tr, **text)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def sd3_pipeline(S: dict, dev: torch.device, dtype: torch.dtype):
    """``StableDiffusion3Pipeline`` of SD3-Medium: transformer, VAE, CLIP-L, CLIP-bigG and T5-XXL."""
    from diffusers import FlowMatchEulerDiscreteScheduler, SD3Transformer2DModel, StableDiffusion3Pipeline

    from tools.tiny_models.pipelines import t5_tokenizer_offline
    from nearid_lib.generate.tiny_sd import clip_tokenizer_offline

    with on_device(dev, dtype):
        parts = dict(transformer=SD3Transformer2DModel(**S["sd3"]), vae=vae(S["sd3_vae"]),
                     text_encoder=clip_text(S["clip_l_text"], True), text_encoder_2=clip_text(S["clip_g_text"], True),
                     text_encoder_3=t5_encoder(S["t5"]))
    _eval(*parts.values())
    pipe = StableDiffusion3Pipeline(**parts, scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0),
                                    tokenizer=clip_tokenizer_offline(), tokenizer_2=clip_tokenizer_offline(),
                                    tokenizer_3=t5_tokenizer_offline())
    pipe.set_progress_bar_config(disable=True)
    return pipe


def meta_params(name: str, S: dict | None = None) -> int:
    """Parameters of one real model built on the meta device (no memory): the check of the sizes
    against :data:`PUBLISHED_PARAMS`."""
    S = S or PAPER
    with torch.device("meta"):
        if name == "siglip2_so400m":
            from transformers import SiglipVisionConfig, SiglipVisionModel

            return n_params(SiglipVisionModel(SiglipVisionConfig(**S["siglip"])))
        if name == "qwen3vl_30b":
            from transformers import Qwen3VLMoeConfig, Qwen3VLMoeForConditionalGeneration

            return n_params(Qwen3VLMoeForConditionalGeneration(Qwen3VLMoeConfig(
                text_config=S["qwen"]["text"], vision_config=S["qwen"]["vision"], tie_word_embeddings=False)))
        if name == "flux_transformer":
            from diffusers import FluxTransformer2DModel

            return n_params(FluxTransformer2DModel(in_channels=64, **S["flux"]))
        if name == "t5_xxl_encoder":
            return n_params(t5_encoder(S["t5"]))
        if name == "sd3_transformer":
            from diffusers import SD3Transformer2DModel

            return n_params(SD3Transformer2DModel(**S["sd3"]))
        if name == "sdxl_unet":
            from diffusers import UNet2DConditionModel

            return n_params(UNet2DConditionModel(**S["sdxl_unet"]))
    raise KeyError(name)


def describe(model: Any) -> dict:
    """Parameter count (millions) and dtype of a model or pipeline, for the results."""
    mods = [model] if isinstance(model, torch.nn.Module) else [
        m for m in getattr(model, "components", {}).values() if isinstance(m, torch.nn.Module)]
    dts = sorted({str(p.dtype).replace("torch.", "") for m in mods for p in m.parameters()})
    return {"params_M": round(n_params(model) / 1e6, 1), "dtype": "/".join(dts)}
