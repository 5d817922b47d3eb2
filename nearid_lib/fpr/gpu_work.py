"""FPR's GPU-heavy steps in the resource ledger: the galleries' embeddings, the five personalized
generators (IP-Adapter, IP-Adapter-Plus, FLUX.1 Kontext, Diptych Prompting, DreamBooth with its
training and class images), background removal, and the DreamBench++ GPT column (network only).

Per-image generation costs come from ``benchmarks/results/bench_fpr_generation_cpu.json``: each
method's denoiser FLOPs counted at its paper settings, at an assumed 40% of an A100-80GB's bf16 peak
(projected; the GPU suite's entries replace them once measured)."""
from __future__ import annotations

from ..generate.dreambooth import TRAINING_MEMORY
from ..steps.ledger import Cost, ModelUse, Step, measured_results, register_step, suite_cost, suite_entry

__all__ = ["FPR_SIZES", "generated_images"]

GB = 1e9
# FPR Sec. 4: 80 subjects (CUB, Stanford Cars, WildlifeReID-10k species), 10 images each per method,
# DreamBooth's 100 class images per dataset of 9; gallery images: CUB-200-2011 11,788, Stanford Cars
# 16,185, WildlifeReID-10k 140,488 (the datasets' own counts; the galleries are drawn from them)
# the DB++ column rates the seven methods' images (Sec. 4: five generated here, Emu2 and OminiControl
# from the user's folder) and every reference (5-10 a subject, Sec. 4.1: the upper end counted)
FPR_SIZES = {"subjects": 80, "images_per_subject": 10, "class_images": 100, "datasets": 9,
             "gallery_images": 11_788 + 16_185 + 140_488, "methods_rated": 7, "references_per_subject": 10}
_PIPE = {"ip_adapter": "stabilityai/stable-diffusion-xl-base-1.0",
         "ip_adapter_plus": "stabilityai/stable-diffusion-xl-base-1.0",
         "flux_kontext": "black-forest-labs/FLUX.1-Kontext-dev", "diptych": "black-forest-labs/FLUX.1-Fill-dev",
         "dreambooth": "stabilityai/stable-diffusion-3-medium-diffusers"}


def generated_images() -> int:
    """Images one method generates: subjects x images per subject."""
    return FPR_SIZES["subjects"] * FPR_SIZES["images_per_subject"]


def _flop_cost(method: str) -> Cost:
    res = measured_results("bench_fpr_generation_cpu.json") or {}
    row = next((r for r in res.get("projected", []) if r["method"] == method), None)
    if row is None:
        return Cost(10.0, "A100-80GB", "compute", "projected", "no FLOP count committed: 10 s an item assumed")
    # the file's workload: its items are images, or (training) one run per subject
    per_item = row.get("tflop_per_image") or row.get("tflop_total")
    items = row["tflop_workload"] / per_item
    return Cost(row["gpu_hours_A100-80GB"] * 3600 / items, "A100-80GB", "compute", "projected",
                f"{row['what']}: {per_item:,.0f} TFLOP an item at 40% of the bf16 peak "
                "(bench_fpr_generation_cpu.json)")


# the GPU suite's entry measuring each cost, and its field: seconds an image (a subject for training)
_SUITE = {"ip_adapter": ("ip_adapter", "s_per_image"), "ip_adapter_plus": ("ip_adapter_plus", "s_per_image"),
          "flux_kontext": ("flux_kontext", "s_per_image"), "diptych": ("diptych", "s_per_image"),
          "dreambooth": ("dreambooth_infer", "s_per_image"),
          "dreambooth (training, per subject)": ("dreambooth_train_full", "s_per_subject")}


def _gen_cost(method: str) -> Cost:
    """A method's cost per item: the GPU suite's measurement when committed, else the FLOP count."""
    entry, field = _SUITE[method]
    e = suite_entry(entry)
    if e and e.get(field):
        return suite_cost(e, float(e[field]), "compute", f"{field.replace('_', ' ')} at the paper's steps")
    return _flop_cost(method)


def _methods(cfg) -> list[str]:
    return list(cfg.retrieval.generate_methods) if cfg is not None else list(_PIPE)


_GEN = "nearid_lib.fpr.generation"


# a pipeline moves to one GPU whole (diffusers .to(device)): not spread by device_map
for _m in ("ip_adapter", "ip_adapter_plus", "flux_kontext", "diptych"):
    register_step(Step(
        name=f"fpr-generate-{_m}", command="make fpr-generate", target="fpr-generate", entry=_GEN, feeds="FPR Tables 1-2 (the generated images' rows)",
        models=(ModelUse(_PIPE[_m], working_bytes=int(6 * GB) + (int(3.8 * GB) if _m.startswith("ip_adapter") else 0),
                         splittable=False, working_basis="latents, attention and the VAE decode at 1024 px"
                         + ("; the IP-Adapter's image encoder beside it" if _m.startswith("ip_adapter") else ""),
                         companions=("h94/IP-Adapter",) if _m.startswith("ip_adapter") else ()),),
        models_of=lambda cfg, m=_m: [_PIPE[m]] if m in _methods(cfg) else [],
        items=lambda s, cfg, m=_m: generated_images() if m in _methods(cfg) else 0, item="images",
        cost=lambda m=_m: _gen_cost(m), resume="a subject's images are written atomically; done subjects are skipped",
        outputs="$NEARID_DATA/paper/fpr_generated/<method>", written=lambda s, cfg: generated_images() * 1.5e6,
        skip=f"leave {_m} out of retrieval.generate_methods, or give its images under $NEARID_DOWNLOADS/fpr_generated"))

# full fine-tuning of SD3's 2B transformer (generate.dreambooth.TRAINING_MEMORY): its fp32 weights and
# the VAE stay on the GPU, gradients and AdamW moments beside them; the text encoders wait on the CPU
_SD3_TRAINED, _SD3_VAE = 2.03e9, 0.084e9 * 2          # MMDiT parameters; the VAE's bytes in bf16
_TM = TRAINING_MEMORY
register_step(Step(
    name="fpr-dreambooth-train", command="make fpr-generate", target="fpr-generate", entry=_GEN, feeds="FPR's DreamBooth rows",
    models=(ModelUse(_PIPE["dreambooth"], splittable=False,
                     resident_bytes=int(_SD3_TRAINED * _TM["resident_bytes_per_param"] + _SD3_VAE),
                     resident_basis="the 2.03B-parameter transformer in fp32 and the VAE; text encoders on the CPU",
                     working_bytes=int(_SD3_TRAINED * (_TM["bytes_per_trained_param"] - _TM["resident_bytes_per_param"])
                                       + _TM["beside_bytes"]),
                     working_basis=f"2.03B trained parameters: gradients and AdamW moments (12 bytes); {_TM['basis']}"),),
    models_of=lambda cfg: [_PIPE["dreambooth"]] if "dreambooth" in _methods(cfg) else [],
    items=lambda s, cfg: FPR_SIZES["subjects"] if "dreambooth" in _methods(cfg) else 0, item="subjects",
    cost=lambda: _gen_cost("dreambooth (training, per subject)"),
    resume="a subject's run checkpoints under resume/step_*/ and resumes bit-identically",
    outputs="per-subject weights.safetensors", written=lambda s, cfg: FPR_SIZES["subjects"] * 2.03e9 * 2,
    skip="leave dreambooth out of retrieval.generate_methods, or give its images under $NEARID_DOWNLOADS/fpr_generated"))
register_step(Step(
    name="fpr-dreambooth-generate", command="make fpr-generate", target="fpr-generate", entry=_GEN, feeds="FPR's DreamBooth rows",
    models=(ModelUse(_PIPE["dreambooth"], working_bytes=int(4 * GB), splittable=False),),
    models_of=lambda cfg: [_PIPE["dreambooth"]] if "dreambooth" in _methods(cfg) else [],
    items=lambda s, cfg: (generated_images() + FPR_SIZES["class_images"] * FPR_SIZES["datasets"])
    if "dreambooth" in _methods(cfg) else 0, item="images",
    cost=lambda: _gen_cost("dreambooth"), resume="images written atomically; done subjects skipped",
    outputs="$NEARID_DATA/paper/fpr_generated/dreambooth", written=lambda s, cfg: generated_images() * 1.5e6))
register_step(Step(
    name="bgremove", command="make bgremove", target="bgremove", entry="nearid_lib.fpr.bg_step", feeds="FPR Table 14 (backgrounds removed)",
    models=(ModelUse("Carve/tracer_b7", working_bytes=int(0.14 * GB + 6 * GB), splittable=False,
                     working_basis="FBA matting's 139 MB weights beside it, and 2,048 px matting",
                     companions=("Carve/fba",)),),
    items=lambda s, cfg: FPR_SIZES["gallery_images"] + 5 * generated_images(), item="images",
    cost=Cost(0.3, "A100-80GB", "compute", "projected",
              "TRACER-B7 at 640 px and FBA matting at 2,048 px in fp32 (carvekit's settings); ~0.3 s an image"),
    resume="each image's cut-out written atomically; present ones skipped", outputs="background-removed copies",
    written=lambda s, cfg: (FPR_SIZES["gallery_images"] + 5 * generated_images()) * 0.5e6))
register_step(Step(
    name="fpr-galleries", command="make fpr-galleries", target="fpr-galleries", entry="nearid_lib.fpr.galleries_step",
    feeds="every FPR table (the nine galleries the generation step, background removal and notebook 11 read)",
    models=(), gpus="none", items=lambda s, cfg: FPR_SIZES["gallery_images"], item="images",
    cost=Cost(0.002, "", "cpu", "projected", "reading each source image's metadata and writing the tables on one "
              "core (~500 images/s): no image is decoded"),
    resume="rebuilt whole, deterministically (a draw seeded by the profile)",
    outputs="$NEARID_DATA/paper/fpr/<dataset>/{train,gallery}_data.csv"))
register_step(Step(
    name="fpr-embed", command="notebook 11", gpus="one", feeds="FPR Tables 1-2 and 10-14 (gallery embeddings)",
    models=(ModelUse("imageomics/bioclip-2", working_bytes=int(4 * GB), splittable=False),
            ModelUse("conservationxlabs/miewid-msv2", working_bytes=int(4 * GB), splittable=False),
            ModelUse("facebook/dinov2-base", working_bytes=int(4 * GB), splittable=False),
            ModelUse("openai/clip-vit-base-patch32", working_bytes=int(4 * GB), splittable=False)),
    per_model=True, items=lambda s, cfg: FPR_SIZES["gallery_images"] + 5 * generated_images(), item="images",
    cost=Cost(0.004, "A100-80GB", "compute", "projected",
              "a ViT-B/L forward at 224-440 px in batches, decoding in DataLoader workers: ~250 images/s"),
    resume="embeddings cached per encoder and image", outputs="$NEARID_CACHE/paper embedding caches"))
register_step(Step(
    name="fpr-gpt", command="make fpr-gpt", target="fpr-gpt", entry="nearid_lib.fpr.gpt_step",
    feeds="FPR Table 1's DB++ (GPT) column (notebook 11 reads the answers)",
    models=(), gpus="none", item="requests",
    items=lambda s, cfg: (FPR_SIZES["methods_rated"] * generated_images()
                          + FPR_SIZES["subjects"] * FPR_SIZES["references_per_subject"]),
    cost=Cost(4.0, "", "network", "projected", "one gpt-4o request a generated image, ~4 s (its rate limits may slow it)"),
    network="api.openai.com (OPENAI_API_KEY); gated closed when unreachable",
    resume="answers appended per request; a rerun asks only the missing and failed ones",
    outputs="GPT answers JSONL"))
