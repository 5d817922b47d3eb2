"""A real diffusers ``StableDiffusionInpaintPipeline`` with tiny random weights, built offline (tests,
throughput): the full diffusers inpainting code path without downloading a model. Its CLIP tokenizer
is built from open_clip's bundled BPE vocabulary (:func:`clip_tokenizer_offline`)."""
from __future__ import annotations

import gzip
import os
from functools import lru_cache

import torch

__all__ = ["clip_tokenizer_offline", "build_tiny_sd_inpaint_pipeline"]


def _bytes_to_unicode() -> list[str]:
    # GPT-2/CLIP byte-level BPE alphabet: printable bytes map to themselves, the rest shift up.
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
          + list(range(ord("®"), ord("ÿ") + 1)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return [chr(c) for c in cs]


@lru_cache(maxsize=1)
def _clip_vocab() -> tuple[dict[str, int], list[tuple[str, str]]]:
    import open_clip

    path = os.path.join(os.path.dirname(open_clip.__file__), "bpe_simple_vocab_16e6.txt.gz")
    lines = gzip.open(path).read().decode("utf-8").split("\n")
    # Same cut as CLIP's tokenizer: 49152 - 256 - 2 merges, vocab 49408 with the two specials.
    merges = [tuple(m.split()) for m in lines[1:49152 - 256 - 2 + 1]]
    alphabet = _bytes_to_unicode()
    tokens = alphabet + [a + "</w>" for a in alphabet] + ["".join(m) for m in merges]
    tokens += ["<|startoftext|>", "<|endoftext|>"]
    return {t: i for i, t in enumerate(tokens)}, merges


def clip_tokenizer_offline(model_max_length: int = 77):
    """A real ``transformers.CLIPTokenizer`` built offline from open_clip's bundled BPE vocabulary
    (same ids as OpenAI CLIP's tokenizer, 49408 tokens)."""
    from transformers import CLIPTokenizer

    vocab, merges = _clip_vocab()
    return CLIPTokenizer(vocab=dict(vocab), merges=list(merges), model_max_length=model_max_length)


def build_tiny_sd_inpaint_pipeline(seed: int = 0):
    """A real ``StableDiffusionInpaintPipeline`` with tiny random weights (64 px, latent 8x8).

    Every component is the production class (UNet2DConditionModel with the 9-channel inpainting
    input, AutoencoderKL with the SD downsampling factor 8, CLIPTextModel, CLIPTokenizer, DDIM);
    only the widths are tiny, so the full diffusers inpainting code path runs offline in ~50 ms."""
    from diffusers import (AutoencoderKL, DDIMScheduler, StableDiffusionInpaintPipeline,
                           UNet2DConditionModel)
    from transformers import CLIPTextConfig, CLIPTextModel

    g = torch.random.fork_rng()
    with g:
        torch.manual_seed(seed)
        unet = UNet2DConditionModel(
            block_out_channels=(32, 64), layers_per_block=1, sample_size=8, in_channels=9,
            out_channels=4, down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"),
            up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"), cross_attention_dim=32,
            norm_num_groups=8, attention_head_dim=4)
        vae = AutoencoderKL(
            block_out_channels=(8, 16, 16, 16), in_channels=3, out_channels=3,
            down_block_types=("DownEncoderBlock2D",) * 4, up_block_types=("UpDecoderBlock2D",) * 4,
            latent_channels=4, norm_num_groups=8, sample_size=64, layers_per_block=1)
        text_encoder = CLIPTextModel(CLIPTextConfig(
            hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=4,
            vocab_size=49408, max_position_embeddings=77, projection_dim=32,
            bos_token_id=49406, eos_token_id=49407, pad_token_id=49407))
    scheduler = DDIMScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
                              clip_sample=False, set_alpha_to_one=False, steps_offset=1)
    pipe = StableDiffusionInpaintPipeline(
        vae=vae, text_encoder=text_encoder, tokenizer=clip_tokenizer_offline(), unet=unet,
        scheduler=scheduler, safety_checker=None, feature_extractor=None,
        requires_safety_checker=False)
    pipe.set_progress_bar_config(disable=True)
    return pipe
