"""A tiny random-init CLIPSeg folder in the layout of a real ``CIDAS/clipseg-rd64-refined`` download,
for the tests and the dry run's fixtures (not part of the library)."""
from __future__ import annotations

from pathlib import Path

import torch
from PIL import Image

from nearid_lib.data.masks import MAX_TOKENS
from nearid_lib.generate.tiny_sd import clip_tokenizer_offline

__all__ = ["save_tiny_clipseg"]


def save_tiny_clipseg(path: Path, seed: int = 0) -> Path:
    """Write a tiny random-init ``CLIPSegForImageSegmentation`` + ``CLIPSegProcessor`` into ``path``
    with the layout of a real ``CIDAS/clipseg-rd64-refined`` download (``config.json``,
    ``model.safetensors``, ``preprocessor_config.json``, tokenizer files); built fully offline
    (the CLIP tokenizer comes from open_clip's bundled BPE vocabulary). Widths 32, 2 layers, 64 px
    input: a forward takes milliseconds on CPU. Returns ``path``."""
    from transformers import CLIPSegConfig, CLIPSegForImageSegmentation, ViTImageProcessor

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    config = CLIPSegConfig(
        text_config=dict(vocab_size=49408, hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                         num_attention_heads=4, max_position_embeddings=MAX_TOKENS,
                         bos_token_id=49406, eos_token_id=49407, pad_token_id=49407),
        vision_config=dict(hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                           num_attention_heads=4, image_size=64, patch_size=16),
        # The refined ("rd64-refined") variant's decoder: complex transposed convolution, FiLM at
        # layer 0; extract_layers must index the 2 tiny vision layers.
        projection_dim=32, extract_layers=(0, 1), reduce_dim=16, decoder_num_attention_heads=2,
        decoder_intermediate_size=32, use_complex_transposed_convolution=True)
    with torch.random.fork_rng():  # seeded weights without touching the caller's RNG
        torch.manual_seed(seed)
        model = CLIPSegForImageSegmentation(config).eval()
    model.save_pretrained(path)
    # Saved component by component (not CLIPSegProcessor.save_pretrained, which in transformers 5
    # writes one processor_config.json) so the folder has the real repository's file names and
    # the test loads it the way the real download is loaded. Values as in the real
    # preprocessor_config.json, except the input size (352 there).
    image_processor = ViTImageProcessor(
        do_resize=True, size={"height": 64, "width": 64}, resample=Image.BILINEAR, do_rescale=True,
        rescale_factor=1 / 255, do_normalize=True, image_mean=[0.485, 0.456, 0.406],
        image_std=[0.229, 0.224, 0.225])
    image_processor.save_pretrained(path)
    clip_tokenizer_offline(model_max_length=MAX_TOKENS).save_pretrained(path)
    return path
