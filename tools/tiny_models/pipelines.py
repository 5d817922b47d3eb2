"""Real diffusers SDXL (+ IP-Adapter), SD3, FLUX.1 Kontext and FLUX.1 Fill pipelines with tiny random
weights, built offline for the tests, the dry run's fixtures and the benchmarks (not part of the library): every component is the production class, only the widths
are tiny, so each pipeline's full code path runs on CPU in well under a second at 32-64 px.

CLIP tokenizers come from :func:`nearid_lib.generate.tiny_sd.clip_tokenizer_offline`; the T5 tokenizer
is a real ``T5TokenizerFast`` over a small deterministic character vocabulary
(:func:`t5_tokenizer_offline`). IP-Adapter weights are random but laid out like the original
h94/IP-Adapter checkpoints (:func:`tiny_ip_adapter_state_dict`, :func:`write_tiny_ip_adapter`), so
``pipe.load_ip_adapter`` goes through diffusers' own conversion exactly as for the real files.

Tiny call arguments (all pipelines: ``num_inference_steps`` 2-4, ``generator=torch.Generator()``):

* SDXL / SD3: ``height=width=32`` or ``64`` (multiples of 16 for SD3: VAE factor 8 x patch 2).
* FLUX Kontext: ``prompt=..., image=<PIL 32x32>, height=32, width=32, max_area=32 * 32,
  _auto_resize=False`` (``image`` is Kontext's first positional argument: pass ``prompt=`` by name).
* FLUX Fill: ``image=<PIL>, mask_image=<PIL L>, height=32, width=32`` (multiples of 16).
* SD3 / FLUX accept ``max_sequence_length`` (T5 length, default 256 / 512); smaller is faster.
"""
from __future__ import annotations

import string
from pathlib import Path

import torch

from nearid_lib.generate.tiny_sd import clip_tokenizer_offline

__all__ = ["IP_ADAPTER_WEIGHT_NAMES", "build_tiny_flux_fill_pipeline", "build_tiny_flux_kontext_pipeline",
           "build_tiny_sd3_pipeline", "build_tiny_sdxl_pipeline", "t5_tokenizer_offline",
           "tiny_ip_adapter_state_dict", "write_tiny_ip_adapter"]

# Weight file names of the SDXL IP-Adapters in the hub repo h94/IP-Adapter (subfolder sdxl_models).
IP_ADAPTER_WEIGHT_NAMES = {False: "ip-adapter_sdxl.safetensors",
                           True: "ip-adapter-plus_sdxl_vit-h.safetensors"}

_CLIP_VOCAB = 49408
_CLIP_BOS, _CLIP_EOS = 49406, 49407
_RESAMPLER_DIM_HEAD = 64   # diffusers infers the Resampler's heads as to_q rows // 64
_RESAMPLER_DEPTH = 4       # diffusers converts exactly layers 0..3
_RESAMPLER_QUERIES = 16    # IP-Adapter-Plus SDXL uses 16 image tokens


def t5_tokenizer_offline(model_max_length: int = 512):
    """A real ``transformers.T5TokenizerFast`` (Unigram, SentencePiece-style ``▁`` metaspace) built
    offline over a deterministic vocabulary: ``<pad>``=0, ``</s>``=1, ``<unk>``=2, ``▁``, then every
    printable ASCII character alone and with a leading ``▁`` (191 pieces, no sentinel ids). Encoding
    appends ``</s>``; any ASCII prompt round-trips through ``decode(..., skip_special_tokens=True)``."""
    from transformers import T5TokenizerFast

    chars = [c for c in string.printable if not c.isspace()]
    vocab = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("▁", -6.0)]
    vocab += [(c, -5.0) for c in chars] + [("▁" + c, -4.0) for c in chars]
    return T5TokenizerFast(vocab=vocab, extra_ids=0, model_max_length=model_max_length)


def _clip_text(with_projection: bool, hidden: int = 32, projection: int = 32):
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection

    cfg = CLIPTextConfig(hidden_size=hidden, intermediate_size=37, num_hidden_layers=2,
                         num_attention_heads=4, vocab_size=_CLIP_VOCAB, max_position_embeddings=77,
                         projection_dim=projection, bos_token_id=_CLIP_BOS, eos_token_id=_CLIP_EOS,
                         pad_token_id=_CLIP_EOS)
    return (CLIPTextModelWithProjection if with_projection else CLIPTextModel)(cfg)


def _t5_encoder(vocab_size: int, d_model: int):
    from transformers import T5Config, T5EncoderModel

    return T5EncoderModel(T5Config(
        vocab_size=vocab_size, d_model=d_model, d_kv=8, d_ff=37, num_layers=2, num_heads=4,
        relative_attention_num_buckets=8, relative_attention_max_distance=32, dropout_rate=0.0,
        decoder_start_token_id=0, pad_token_id=0, eos_token_id=1))


def _vae(latent_channels: int, scaling_factor: float, shift_factor: float | None = None,
         quant_conv: bool = True):
    """AutoencoderKL with four levels (downsampling factor 8, as SD/SDXL/SD3/FLUX) and tiny widths."""
    from diffusers import AutoencoderKL

    return AutoencoderKL(
        block_out_channels=(8, 16, 16, 16), in_channels=3, out_channels=3,
        down_block_types=("DownEncoderBlock2D",) * 4, up_block_types=("UpDecoderBlock2D",) * 4,
        latent_channels=latent_channels, norm_num_groups=8, sample_size=64, layers_per_block=1,
        scaling_factor=scaling_factor, shift_factor=shift_factor, use_quant_conv=quant_conv,
        use_post_quant_conv=quant_conv)


def _finish(pipe):
    # Modules built by their constructors start in training mode (T5 would apply dropout): switch
    # every component to eval, as from_pretrained does, and silence the progress bar.
    for component in pipe.components.values():
        if isinstance(component, torch.nn.Module):
            component.eval()
    pipe.set_progress_bar_config(disable=True)
    return pipe


def _flux_scheduler():
    from diffusers import FlowMatchEulerDiscreteScheduler

    return FlowMatchEulerDiscreteScheduler(shift=3.0, use_dynamic_shifting=True, base_shift=0.5,
                                           max_shift=1.15, base_image_seq_len=256,
                                           max_image_seq_len=4096)


def build_tiny_sdxl_pipeline(seed: int = 0):
    """A real ``StableDiffusionXLPipeline`` with tiny random weights (default 64 px, latent 8x8),
    ready for IP-Adapter without the hub.

    UNet2DConditionModel with SDXL's ``text_time`` added conditioning (cross-attention width = the two
    CLIP text widths concatenated, 32 + 32), CLIPTextModel + CLIPTextModelWithProjection with offline
    CLIP tokenizers, AutoencoderKL (factor 8, SDXL scaling 0.13025), EulerDiscreteScheduler, no
    watermarker; plus a tiny ``CLIPVisionModelWithProjection`` ``image_encoder`` (32 px, patch 8)
    and a matching ``CLIPImageProcessor`` ``feature_extractor``, so ``pipe.load_ip_adapter(...,
    image_encoder_folder=None)`` works with :func:`write_tiny_ip_adapter`. Call with
    ``height=width=32`` (or 64) and ``num_inference_steps=2``."""
    from diffusers import (
        EulerDiscreteScheduler,
        StableDiffusionXLPipeline,
        UNet2DConditionModel,
    )
    from transformers import (
        CLIPImageProcessor,
        CLIPVisionConfig,
        CLIPVisionModelWithProjection,
    )

    with torch.random.fork_rng():
        torch.manual_seed(seed)
        text_encoder = _clip_text(False)
        text_encoder_2 = _clip_text(True)
        time_dim = 8
        unet = UNet2DConditionModel(
            block_out_channels=(32, 64), layers_per_block=1, sample_size=8, in_channels=4,
            out_channels=4, down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
            up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"), attention_head_dim=(2, 4),
            use_linear_projection=True, norm_num_groups=8, transformer_layers_per_block=(1, 1),
            cross_attention_dim=text_encoder.config.hidden_size + text_encoder_2.config.hidden_size,
            addition_embed_type="text_time", addition_time_embed_dim=time_dim,
            projection_class_embeddings_input_dim=6 * time_dim + text_encoder_2.config.projection_dim)
        vae = _vae(4, 0.13025)
        image_encoder = CLIPVisionModelWithProjection(CLIPVisionConfig(
            hidden_size=32, intermediate_size=37, projection_dim=32, num_hidden_layers=2,
            num_attention_heads=4, image_size=32, patch_size=8))
    size = image_encoder.config.image_size
    feature_extractor = CLIPImageProcessor(size={"shortest_edge": size},
                                           crop_size={"height": size, "width": size})
    scheduler = EulerDiscreteScheduler(beta_start=0.00085, beta_end=0.012,
                                       beta_schedule="scaled_linear", timestep_spacing="leading",
                                       steps_offset=1)
    pipe = StableDiffusionXLPipeline(
        vae=vae, text_encoder=text_encoder, text_encoder_2=text_encoder_2,
        tokenizer=clip_tokenizer_offline(), tokenizer_2=clip_tokenizer_offline(), unet=unet,
        scheduler=scheduler, image_encoder=image_encoder, feature_extractor=feature_extractor,
        add_watermarker=False)
    return _finish(pipe)


def _cross_attention_hidden_sizes(unet) -> list[int]:
    # Same walk as diffusers' _convert_ip_adapter_attn_to_diffusers: every attention processor that
    # is not a self-attention (attn1) nor a motion module gets an IP-Adapter key/value projection.
    cfg = unet.config
    sizes = []
    for name in unet.attn_processors:
        if name.endswith("attn1.processor") or "motion_modules" in name:
            continue
        if name.startswith("mid_block"):
            sizes.append(cfg.block_out_channels[-1])
        elif name.startswith("up_blocks"):
            sizes.append(list(reversed(cfg.block_out_channels))[int(name[len("up_blocks.")])])
        else:
            sizes.append(cfg.block_out_channels[int(name[len("down_blocks.")])])
    return sizes


def tiny_ip_adapter_state_dict(pipe, plus: bool = False, seed: int = 0) -> dict:
    """Random IP-Adapter weights in the ORIGINAL checkpoint layout (h94/IP-Adapter):
    ``{"image_proj": {...}, "ip_adapter": {...}}``, accepted by ``pipe.load_ip_adapter``.

    ``plus=False``: the plain image projection (``proj.weight/bias``, ``norm.weight/bias``; 4 image
    tokens from the CLIP ``image_embeds``), converted by diffusers to ``ImageProjection``.
    ``plus=True``: the IP-Adapter-Plus Resampler (``latents``, ``proj_in``, ``proj_out``,
    ``norm_out``, ``layers.{i}.0.{norm1,norm2,to_q,to_kv,to_out}``, ``layers.{i}.1.{0,1,3}``; 4
    layers, 16 queries, head width 64, reading the encoder's penultimate hidden states), converted to
    ``IPAdapterPlusImageProjection``. ``ip_adapter`` holds ``{k}.to_k_ip.weight`` and
    ``{k}.to_v_ip.weight`` for k = 1, 3, 5, ... over the UNet's cross-attention processors, in
    diffusers' enumeration order. Shapes come from ``pipe.unet.config`` and
    ``pipe.image_encoder.config``; values from a generator seeded with ``seed``."""
    unet_cfg, enc_cfg = pipe.unet.config, pipe.image_encoder.config
    cross = unet_cfg.cross_attention_dim
    g = torch.Generator().manual_seed(seed)

    def lin(out_f: int, in_f: int) -> torch.Tensor:
        return torch.randn(out_f, in_f, generator=g) / in_f ** 0.5

    def vec(n: int, base: float = 0.0) -> torch.Tensor:
        return base + 0.02 * torch.randn(n, generator=g)

    image_proj: dict[str, torch.Tensor] = {}
    if not plus:
        n_tokens, embed = 4, enc_cfg.projection_dim
        image_proj["proj.weight"] = lin(n_tokens * cross, embed)
        image_proj["proj.bias"] = vec(n_tokens * cross)
        image_proj["norm.weight"] = vec(cross, 1.0)
        image_proj["norm.bias"] = vec(cross)
    else:
        embed = enc_cfg.hidden_size
        heads = max(1, cross // _RESAMPLER_DIM_HEAD)
        hidden = inner = heads * _RESAMPLER_DIM_HEAD
        image_proj["latents"] = torch.randn(1, _RESAMPLER_QUERIES, hidden, generator=g) / hidden ** 0.5
        image_proj["proj_in.weight"], image_proj["proj_in.bias"] = lin(hidden, embed), vec(hidden)
        image_proj["proj_out.weight"], image_proj["proj_out.bias"] = lin(cross, hidden), vec(cross)
        image_proj["norm_out.weight"], image_proj["norm_out.bias"] = vec(cross, 1.0), vec(cross)
        for i in range(_RESAMPLER_DEPTH):
            p = f"layers.{i}."
            for norm in ("0.norm1", "0.norm2", "1.0"):
                image_proj[p + norm + ".weight"] = vec(hidden, 1.0)
                image_proj[p + norm + ".bias"] = vec(hidden)
            image_proj[p + "0.to_q.weight"] = lin(inner, hidden)
            image_proj[p + "0.to_kv.weight"] = lin(2 * inner, hidden)
            image_proj[p + "0.to_out.weight"] = lin(hidden, inner)
            image_proj[p + "1.1.weight"] = lin(4 * hidden, hidden)
            image_proj[p + "1.3.weight"] = lin(hidden, 4 * hidden)
    ip_adapter: dict[str, torch.Tensor] = {}
    for k, size in enumerate(_cross_attention_hidden_sizes(pipe.unet)):
        ip_adapter[f"{2 * k + 1}.to_k_ip.weight"] = lin(size, cross)
        ip_adapter[f"{2 * k + 1}.to_v_ip.weight"] = lin(size, cross)
    return {"image_proj": image_proj, "ip_adapter": ip_adapter}


def write_tiny_ip_adapter(folder, pipe, plus: bool, seed: int = 0, subfolder: str = "sdxl_models",
                          weight_name: str | None = None) -> Path:
    """Write :func:`tiny_ip_adapter_state_dict` as ONE safetensors file laid out like the hub repo
    h94/IP-Adapter: ``<folder>/<subfolder>/<weight_name>`` (default ``ip-adapter_sdxl.safetensors``
    or ``ip-adapter-plus_sdxl_vit-h.safetensors``), the two parts flattened under the key prefixes
    ``image_proj.`` and ``ip_adapter.`` that diffusers' ``load_ip_adapter`` splits on. Returns the
    file's path; load it with ``pipe.load_ip_adapter(str(folder), subfolder=subfolder,
    weight_name=weight_name, image_encoder_folder=None)``."""
    from safetensors.torch import save_file

    weight_name = weight_name or IP_ADAPTER_WEIGHT_NAMES[bool(plus)]
    state = tiny_ip_adapter_state_dict(pipe, plus=plus, seed=seed)
    flat = {f"{part}.{key}": value.contiguous()
            for part, tensors in state.items() for key, value in tensors.items()}
    path = Path(folder) / subfolder / weight_name
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(flat, str(path))
    return path


def build_tiny_sd3_pipeline(seed: int = 0, with_t5: bool = True):
    """A real ``StableDiffusion3Pipeline`` with tiny random weights (default 64 px).

    SD3Transformer2DModel (patch 2, 16 latent channels, 2 joint blocks), AutoencoderKL with SD3's
    config (16 latent channels, no quant convs, scaling 1.5305, shift 0.0609, factor 8),
    FlowMatchEulerDiscreteScheduler (shift 3.0), two CLIPTextModelWithProjection (32 wide) with
    offline CLIP tokenizers and, when ``with_t5``, a T5EncoderModel (64 wide) with
    :func:`t5_tokenizer_offline` (else ``text_encoder_3``/``tokenizer_3`` are ``None`` and the
    pipeline feeds zeros). The joint width is the T5 width (>= the concatenated CLIP widths, which
    SD3 zero-pads). Call with ``height=width=32`` (multiples of 16) and ``num_inference_steps=2``."""
    from diffusers import (
        FlowMatchEulerDiscreteScheduler,
        SD3Transformer2DModel,
        StableDiffusion3Pipeline,
    )

    t5_tok = t5_tokenizer_offline() if with_t5 else None
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        text_encoder, text_encoder_2 = _clip_text(True), _clip_text(True)
        joint = text_encoder.config.hidden_size + text_encoder_2.config.hidden_size
        text_encoder_3 = _t5_encoder(len(t5_tok), joint) if with_t5 else None
        vae = _vae(16, 1.5305, 0.0609, quant_conv=False)
        transformer = SD3Transformer2DModel(
            sample_size=8, patch_size=2, in_channels=vae.config.latent_channels, num_layers=2,
            attention_head_dim=8, num_attention_heads=4, joint_attention_dim=joint,
            caption_projection_dim=32,
            pooled_projection_dim=(text_encoder.config.projection_dim
                                   + text_encoder_2.config.projection_dim),
            out_channels=vae.config.latent_channels, pos_embed_max_size=32)
    pipe = StableDiffusion3Pipeline(
        transformer=transformer, scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0), vae=vae,
        text_encoder=text_encoder, tokenizer=clip_tokenizer_offline(),
        text_encoder_2=text_encoder_2, tokenizer_2=clip_tokenizer_offline(),
        text_encoder_3=text_encoder_3, tokenizer_3=t5_tok)
    return _finish(pipe)


def _flux_components(seed: int, fill: bool) -> dict:
    from diffusers import FluxTransformer2DModel

    t5_tok = t5_tokenizer_offline()
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        text_encoder = _clip_text(False)
        text_encoder_2 = _t5_encoder(len(t5_tok), 32)
        vae = _vae(16, 0.3611, 0.1159, quant_conv=False)
        packed = 4 * vae.config.latent_channels           # 2x2 patches of latent channels
        factor = 2 ** (len(vae.config.block_out_channels) - 1)
        # Fill: packed noisy latents + packed masked-image latents + packed (factor x factor) mask.
        in_channels = 2 * packed + 4 * factor * factor if fill else packed
        transformer = FluxTransformer2DModel(
            patch_size=1, in_channels=in_channels, out_channels=packed, num_layers=1,
            num_single_layers=1, attention_head_dim=16, num_attention_heads=2,
            joint_attention_dim=text_encoder_2.config.d_model,
            pooled_projection_dim=text_encoder.config.hidden_size, guidance_embeds=True,
            axes_dims_rope=(4, 6, 6))
    return {"scheduler": _flux_scheduler(), "vae": vae, "text_encoder": text_encoder,
            "tokenizer": clip_tokenizer_offline(), "text_encoder_2": text_encoder_2,
            "tokenizer_2": t5_tok, "transformer": transformer}


def build_tiny_flux_kontext_pipeline(seed: int = 0):
    """A real ``FluxKontextPipeline`` with tiny random weights.

    FluxTransformer2DModel (1 double + 1 single block, guidance embedding, RoPE axes 4+6+6 = head
    width 16), CLIPTextModel + offline CLIP tokenizer (pooled 32), T5EncoderModel (32 wide) +
    :func:`t5_tokenizer_offline`, AutoencoderKL with FLUX's config (16 latent channels, no quant
    convs, scaling 0.3611, shift 0.1159, factor 8), dynamically shifted FlowMatchEulerDiscreteScheduler.

    Kontext rescales its OUTPUT to ``max_area`` pixels (default 1024**2) at the height/width aspect
    ratio and snaps its reference IMAGE to a preferred Kontext resolution (~1 MP) unless
    ``_auto_resize=False``. Tiny call: ``pipe(prompt=..., image=<PIL 32x32>, height=32, width=32,
    max_area=32 * 32, _auto_resize=False, num_inference_steps=2, generator=...)`` (``image`` is the
    first positional parameter, so name ``prompt``; sizes multiples of 16; the reference keeps its
    own size floored to a multiple of 16)."""
    from diffusers import FluxKontextPipeline

    pipe = FluxKontextPipeline(**_flux_components(seed, fill=False))
    return _finish(pipe)


def build_tiny_flux_fill_pipeline(seed: int = 0):
    """A real ``FluxFillPipeline`` with tiny random weights, same text stack and VAE as
    :func:`build_tiny_flux_kontext_pipeline`; the transformer's input width is derived from the VAE:
    packed latents (4 x 16) + packed masked-image latents (4 x 16) + packed mask (4 x 8 x 8) = 384
    channels, output 64. Tiny call: ``pipe(prompt, image=<PIL>, mask_image=<PIL L>, height=32,
    width=32, num_inference_steps=2, generator=...)`` (multiples of 16)."""
    from diffusers import FluxFillPipeline

    pipe = FluxFillPipeline(**_flux_components(seed, fill=True))
    return _finish(pipe)
