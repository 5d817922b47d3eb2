# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
# ---

# %% [markdown]
# # 99 - Report
# Renders `README.md` in the run's figures folder (`figures/`; paper: `figures/paper/`): the claims each
# notebook checked, every table with the paper's values beside ours (read from `paper_values/` and from
# the CSVs the notebooks wrote), and every figure.

# %% tags=["parameters"]
PROFILE = "mini"
SEED = 0

# %%
from IPython.display import Markdown

from nearid_lib.io_utils import atomic_write_text
from nearid_lib.report import load_specs, profile_note, render_report
from nearid_lib.run import start_run

run = start_run(PROFILE, SEED, "99_report")
cfg = run.cfg
figs = run.figures
specs = load_specs()
print(f"{len(specs)} paper tables described in paper_values/")

# %%
text = render_report(figs, specs, profile_note=profile_note(cfg.name, cfg.backbone.name, cfg.world.source))
atomic_write_text(figs / "README.md", text)
print("wrote", figs / "README.md")
Markdown(text[:6000])
