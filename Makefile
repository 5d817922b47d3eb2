# NearID / ID-Sim / FPR reproduction.
#   make reproduce               # PROFILE=mini (offline default): every notebook, figures/ and tables
#   make reproduce PROFILE=paper # GPU nodes with the Hugging Face hub reachable
#   make reproduce-full          # mini with every ID-Sim ablation table and five seeds per trained row (build/full-mini)
#   make test                    # import layers, pytest, every notebook in PROFILE=smoke, the paper dry run
#   make dryrun-paper            # every notebook in PROFILE=paper on a fixture hub mirror (build/dryrun)
#   make preflight               # PROFILE=paper: everything the run reads or needs, checked in seconds
#   make wheelhouse [TORCH=cu128]  # with network: every wheel make install needs, into wheelhouse/
#   make lab                     # JupyterLab on the notebooks with the repository's kernel
# Executed notebooks and logs: $NEARID_OUT (default build)/$(PROFILE)/notebooks/. Figures/tables: figures/
# (paper: figures/paper/, smoke: build/smoke/figures; with NEARID_FIGURES set: there, every profile).
SHELL := /bin/bash
PROFILE ?= mini
SEED ?= 0
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
STAMP := $(VENV)/.nearid-installed
# the build folder of nearid_lib/paths.py (NEARID_OUT, else build/): the executed notebooks sit beside
# the results and logs they wrote, wherever NEARID_OUT puts them
OUT_ROOT = $(or $(NEARID_OUT),build)
NB_OUT ?= $(OUT_ROOT)/$(PROFILE)/notebooks
NOTEBOOKS := $(sort $(wildcard notebooks/[0-9][0-9]_*.py))
EXECUTED := $(patsubst notebooks/%.py,$(NB_OUT)/%.ipynb,$(NOTEBOOKS))
LIB_SRC := $(shell find nearid_lib -name '*.py' 2>/dev/null)
PAPER_VALUES := $(wildcard paper_values/*)

# Offline profiles fail fast on a missing model instead of retrying the hub for ~46 s.
ifneq ($(PROFILE),paper)
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
endif
export PYTHONHASHSEED := 0
# Portable numerics (nearid_lib/runtime/__init__.py, docs/mini.md "Portable numerics"): the CPU libraries pick
# their code path by processor and split sums by thread count, so the last bits of a trained head
# depend on the machine. On a machine without a GPU every process runs one fixed path (ATen and
# oneDNN at AVX2, MKL's COMPATIBLE branch, OpenBLAS Haswell, numpy without AVX-512 loops) on one
# thread, and any x86-64 CPU with AVX2 regenerates the committed tables bit for bit.
# NEARID_PORTABLE=0 gives each library its fastest path and NEARID_THREADS threads (for speed, e.g.
# NEARID_PORTABLE=0 NEARID_THREADS=8 make reproduce, at the price of last-digit differences).
# PROFILE=paper runs on GPUs: one sweep worker per visible GPU and the node's cores shared among them.
# The GPUs this job may use: CUDA_VISIBLE_DEVICES when it is set (what a scheduler such as Slurm
# gives the job; its entries up to the first negative one, as CUDA reads them; set but empty: none),
# else every GPU nvidia-smi lists. N_GPUS=4 on the command line overrides both.
ifeq ($(origin N_GPUS),undefined)
N_GPUS := $(shell if [ -n "$${CUDA_VISIBLE_DEVICES+set}" ]; then \
  printf '%s\n' "$$CUDA_VISIBLE_DEVICES" | tr ',' '\n' | sed -n '/^ *-/q;/[^ ]/p' | grep -c .; \
  else nvidia-smi -L 2>/dev/null | grep -c '^GPU'; fi)
endif
N_CORES := $(shell nproc 2>/dev/null || echo 2)
# Notebooks at once on CPU (smoke, mini): one per core, at most the 6 that can run beside each other
# after notebook 03 (04-07, 09, 11); `python benchmarks/critical_path.py` projects the wall time.
CPU_JOBS := $(shell n=$(N_CORES); echo $$(( n < 2 ? 2 : (n > 6 ? 6 : n) )))
ifeq ($(N_GPUS),0)
NEARID_PORTABLE ?= 1
else
NEARID_PORTABLE ?= 0
endif
export NEARID_PORTABLE
ifeq ($(PROFILE),paper)
ifneq ($(N_GPUS),0)
NEARID_WORKERS ?= $(N_GPUS)
ifeq ($(NEARID_PORTABLE),0)
NEARID_THREADS ?= $(shell echo $$(( $(N_CORES) / $(N_GPUS) > 0 ? $(N_CORES) / $(N_GPUS) : 1 )))
endif
endif
endif
ifeq ($(NEARID_PORTABLE),0)
NEARID_THREADS ?= 1
export NEARID_THREADS
else ifneq ($(filter-out 1,$(NEARID_THREADS)),)
$(error NEARID_THREADS=$(NEARID_THREADS): portable numerics run one thread per process; set NEARID_PORTABLE=0 as well to run $(NEARID_THREADS))
endif
# Independent head trainings of a sweep (notebooks 03-07) run in this many processes, each with
# one thread (NEARID_THREADS where portable numerics are off); results do not depend on it
# (nearid_lib/nearid/sweep.py). From the core count: each of the notebooks that run at once gets its
# share of the cores, rounded up, at least 2 (2 on 2 to 12 cores, 3 on 16, 6 on 32).
NEARID_WORKERS ?= $(shell n=$$(( ($(N_CORES) + $(CPU_JOBS) - 1) / $(CPU_JOBS) )); echo $$(( n > 2 ? n : 2 )))
export NEARID_WORKERS
export TOKENIZERS_PARALLELISM := false

.PHONY: reproduce reproduce-full notebooks test test-fast pytest lint-imports smoke dryrun-paper dryrun-paper-then-smoke install lock lab clean clean-build help judge idsim-judge curate prefill train-heads preflight wheelhouse gpu-wheels bgremove fpr-galleries fpr-generate fpr-gpt notebook-figures
.DEFAULT_GOAL := help

help:
	@echo "make reproduce [PROFILE=mini|paper]  - run every notebook (only stale ones rerun)"
	@echo "make reproduce-full [PROFILE=mini]    - the same with ID-Sim Supp. Tables 5-7, 9 and five seeds per trained row, into $(FULL_DIR)"
	@echo "make test                            - import layers + pytest + every notebook with PROFILE=smoke + make dryrun-paper"
	@echo "make test-fast                       - import layers + the tests that build no world, start no process, run no notebook"
	@echo "make dryrun-paper [DRYRUN_HUB=dir]    - every notebook with PROFILE=paper on a local hub mirror"
	@echo "make install [WHEELHOUSE=dir]        - create/refresh the virtual environment only (offline from a wheelhouse)"
	@echo "make wheelhouse [TORCH=cu128]        - on a machine with network: the lock's wheels into wheelhouse/"
	@echo "make preflight [PROFILE=paper]       - check the mirror, data, splits, release, environment, disk, GPUs"
	@echo "make lock [LOCK_UPGRADE=1]           - rebuild scripts/requirements.lock from .venv (or newest versions)"
	@echo "make lab                             - JupyterLab on the notebooks (jupytext-paired, repo kernel)"
	@echo "make gpu-wheels                      - .whl/: the wheels benchmarks/gpu_suite.py needs on the lent GPU machine"
	@echo "make $(NB_OUT)/NN_name.ipynb           - one notebook (and what it depends on)"
	@echo "make curate|prefill|judge|fpr-generate PROFILE=paper - one step over every GPU (N_GPUS=$(N_GPUS)), before its notebook"

# TORCH=cpu | cu128 | ... picks the torch build (the wheel index https://download.pytorch.org/whl/$(TORCH));
# default: cu128 where `nvidia-smi` lists a GPU, else the registry's default (CPU) build.
# `make install TORCH=cu128` reinstalls torch as asked even when the venv exists.
# WHEELHOUSE=<dir> installs from a folder `make wheelhouse` filled on a machine with network (pip
# --no-index --find-links: a compute node without internet); TORCH must name the build it holds.
TORCH ?=
WHEELHOUSE ?=
install:
	PYTHON=$(PYTHON) TORCH=$(TORCH) WHEELHOUSE=$(WHEELHOUSE) bash scripts/bootstrap.sh $(VENV)
	@touch $(STAMP)

$(STAMP): pyproject.toml scripts/bootstrap.sh scripts/lock_entries.sh scripts/install_lock.sh scripts/torchvision_cpu_fix.py scripts/constraints.txt scripts/jupyterlab_overrides.json scripts/requirements.lock
	PYTHON=$(PYTHON) TORCH=$(TORCH) WHEELHOUSE=$(WHEELHOUSE) bash scripts/bootstrap.sh $(VENV)
	@touch $@

# The other half of the two-machine setup: on a machine with network and the lock's Python
# (scripts/requirements.lock, "# target:"), every file `make install` installs -- the lock's
# packages (hash-checked), pip and the build backends, torch/torchvision of the TORCH build (cu128:
# with their CUDA packages) -- into $(or $(WHEELHOUSE),wheelhouse)/; carry it to the node and run
# `make install WHEELHOUSE=<that folder> TORCH=<the same build>` there.
wheelhouse:
	PYTHON=$(PYTHON) TORCH=$(TORCH) bash scripts/wheelhouse.sh $(or $(WHEELHOUSE),wheelhouse)

# scripts/requirements.lock (what make install installs, hash-checked; NEARID_LOCK=0 skips it):
# uv pip compile --generate-hashes pinned to the versions installed in $(VENV); LOCK_UPGRADE=1: newest.
# The wheels the GPU suite needs on the lent GPU machine (benchmarks/README.md, "On the lent GPU").
gpu-wheels:
	PY=$(PY) bash scripts/gpu_wheels.sh

lock:
	PYTHON=$(PYTHON) bash scripts/lock.sh $(VENV)

# Notebooks that do not read each other's outputs (04-07, 09 and 11 after 03) run NEARID_JOBS at a
# time; a notebook's outputs do not depend on what runs beside it (each process keeps NEARID_THREADS
# threads, shared caches are built under a lock and published atomically), and --output-sync keeps
# each notebook's lines together. PROFILE=paper defaults to one at a time (the GPUs are the workers).
ifeq ($(PROFILE),paper)
NEARID_JOBS ?= 1
endif
NEARID_JOBS ?= $(CPU_JOBS)
# PROFILE=paper checks everything the run reads or needs first (make preflight): a defect it can see
# stops the run in seconds, not hours in.
reproduce: $(STAMP)
	$(if $(filter paper,$(PROFILE)),$(MAKE) --no-print-directory -o $(STAMP) preflight)
	$(MAKE) --no-print-directory -j$(NEARID_JOBS) --output-sync=target -o $(STAMP) notebooks

# The preflight (nearid_lib/preflight): the mirror against its download records, the datasets'
# layouts and row alignment, the splits, the authors' release, the environment, free disk against
# the projected outputs, GPUs against the judge and the trainer; one line per problem with its fix.
# PREFLIGHT_ALLOW="repo ..." accepts those repositories absent (their tables are then skipped).
# `make preflight` checks the paper profile unless PROFILE is given on the command line.
PREFLIGHT_ALLOW ?=
preflight: $(STAMP)
	$(PY) -m nearid_lib preflight --profile $(if $(filter command line,$(origin PROFILE)),$(PROFILE),paper) \
	  $(if $(PREFLIGHT_ALLOW),--allow-missing $(PREFLIGHT_ALLOW))

# Everything else on request: every notebook of PROFILE (default mini) with ID-Sim's Supp. Tables 5-7
# and 9 beside Table 3 and Supp. Table 8, and five training seeds of every trained row (NearID heads,
# the ID-Sim model, its ablations). Its notebooks, results, checkpoints, figures, tables and report
# (figures/README.md) go to $(FULL_DIR), never into the committed figures/ of `make reproduce`; the
# world and the feature caches (data/, cache/) are shared with it (keyed by content and code).
# A NEARID_SET of your own applies after these. Wall time: docs/paper-profile.md#timings.
FULL_DIR ?= build/full-$(PROFILE)
FULL_SET := idsim.ablation_tables=idsim_table3_data_ablation,idsim_supp_table5_scale,idsim_supp_table6_composition,idsim_supp_table7_backbone,idsim_supp_table8_cls_patch,idsim_supp_table9_loss; idsim.ablation_seeds=5; idsim.n_seeds=5; eval.n_seeds=5
# (command-line variables of the sub-make: they win over a NEARID_SET given on make's command line)
reproduce-full: $(STAMP)
	$(MAKE) --no-print-directory -j$(NEARID_JOBS) --output-sync=target -o $(STAMP) notebooks \
	  NB_OUT=$(FULL_DIR)/notebooks NEARID_OUT="$(abspath $(FULL_DIR))" NEARID_FIGURES="$(abspath $(FULL_DIR))/figures" \
	  NEARID_SET="$(FULL_SET)$(if $(strip $(NEARID_SET)),; $(NEARID_SET))"

# JupyterLab with the repository's kernel ("Python 3 (nearid)", installed into the venv by the
# bootstrap). A double click opens a percent source notebooks/NN_name.py as a notebook (the
# bootstrap sets JupyterLab's default viewer for Python files to "Jupytext Notebook"); jupytext.toml
# pairs it with build/lab/NN_name.ipynb, which keeps the session's outputs. LAB_ARGS: extra options,
# e.g. LAB_ARGS="--no-browser --port 8899". The profile is the notebook's PROFILE parameter.
# As root (uid 0, how most containers run) Jupyter refuses to start without --allow-root.
LAB_ROOT = $(if $(filter 0,$(shell id -u)),--allow-root)
# Its kernels inherit the server's environment: the variables of portable numerics are exported
# first, since a notebook imports numpy and torch before nearid_lib (nearid_lib/runtime/__init__.py).
lab: $(STAMP)
	eval "$$($(PY) -c 'from nearid_lib.runtime import shell_exports; print(shell_exports())')" && \
	$(VENV)/bin/jupyter lab --ServerApp.root_dir="$(CURDIR)" --LabApp.default_url=/lab/tree/notebooks $(LAB_ROOT) $(LAB_ARGS)

# ID-Sim's notebook (09) is the longest that runs on one core, and 10 and 12 wait for it: listed early,
# it starts as soon as 03 is done, with the NearID notebooks beside it (NEARID_JOBS > 1).
notebooks: $(filter $(NB_OUT)/00_environment.ipynb $(NB_OUT)/09_train_idsim.ipynb,$(EXECUTED)) $(EXECUTED)

# An executed notebook is stale when its source, the library, the paper values or an upstream
# notebook it reads from changes. Upstream edges are declared below. A source counts as changed when
# its content does, not its date: JupyterLab rewrites notebooks/NN.py on every save (jupytext.toml
# keeps the bytes when no cell changed), so the notebook depends on a content stamp,
# $(NB_OUT)/.src/NN.sha256, rewritten only when the source's sha256 differs (and dated as the source,
# so a first stamp does not make older executed notebooks look stale). When the source is newer but
# its content the same, the stamp's recipe runs, leaves the stamp as it was, and make reruns nothing.
# Static pattern rules: the stamps are targets of their own (never intermediate files that make may
# skip or delete), so every stamp exists after the first run.
SRC_STAMPS := $(patsubst notebooks/%.py,$(NB_OUT)/.src/%.sha256,$(NOTEBOOKS))
$(SRC_STAMPS): $(NB_OUT)/.src/%.sha256: notebooks/%.py
	@mkdir -p $(@D); if ! sha256sum < $< | cmp -s - $@; then sha256sum < $< > $@ && touch -r $< $@; fi

$(EXECUTED): $(NB_OUT)/%.ipynb: $(NB_OUT)/.src/%.sha256 $(LIB_SRC) $(STAMP)
	bash scripts/run_notebook.sh $(VENV) notebooks/$*.py $@ $(PROFILE) $(SEED)

# ----- upstream edges (what each notebook reads; only for notebooks that exist) -----
nb = $(if $(wildcard notebooks/$(1).py),$(NB_OUT)/$(1).ipynb)
$(NB_OUT)/02_distractor_generation.ipynb: $(call nb,01_data_curation)
# 02 regenerates sources into a folder of its own that no evaluation pool reads (only 99 reads its
# tables), so 03 starts beside it
$(NB_OUT)/03_train_nearid.ipynb: $(call nb,01_data_curation)
$(NB_OUT)/04_eval_nearid_bench.ipynb: $(call nb,03_train_nearid)
$(NB_OUT)/05_loss_ablation.ipynb: $(call nb,03_train_nearid)
$(NB_OUT)/06_alpha_beta_sweep.ipynb: $(call nb,03_train_nearid)
$(NB_OUT)/07_data_ablation.ipynb: $(call nb,03_train_nearid)
$(NB_OUT)/08_embedding_figures.ipynb: $(call nb,04_eval_nearid_bench)
# 09 scores the NearID head of 03 beside ID-Sim when its checkpoint exists
$(NB_OUT)/09_train_idsim.ipynb: $(call nb,01_data_curation) $(call nb,03_train_nearid)
$(NB_OUT)/10_sensitivity_regression.ipynb: $(call nb,03_train_nearid) $(call nb,09_train_idsim)
$(NB_OUT)/11_retrieval_galleries.ipynb: $(call nb,03_train_nearid)
# 12 scores notebook 03's head and notebook 09's ID-Sim on every paper's benchmark
$(NB_OUT)/12_cross_paper.ipynb: $(call nb,03_train_nearid) $(call nb,09_train_idsim) $(call nb,11_retrieval_galleries)
$(NB_OUT)/99_report.ipynb: $(filter-out $(NB_OUT)/99_report.ipynb,$(EXECUTED)) $(PAPER_VALUES)

# ----- steps over every GPU, before a notebook and outside its kernel (paper) -----
# One process per GPU (torchrun), or one plain process without a GPU (the dry run); each step is
# resumable and `make <step> PROFILE=paper` runs it alone. In the paper profile the notebook named
# last waits for it:
# - curate: notebook 01's materialisation of the release (nearid_lib/data/curate_step.py: blocks of
#   identities per rank, CLIPSeg on each GPU, CPU threads decoding and writing PNGs; rank 0 writes
#   the tables), so notebook 01 finds the dataset complete;
# - prefill: every grid training and evaluation read, into the int8 token store
#   (nearid_lib/nearid/prefill_step.py: each grid by one rank, DataLoader workers decoding), so
#   training only reads (smoke, mini: per-group caches, nothing to prefill);
# - judge: the VLM judge on every pair notebook 04 asks about (nearid_lib/nearid/judge_step.py),
#   so notebook 04 reads answers instead of judging;
# - bgremove: FPR Table 14's background removal (nearid_lib/fpr/bg_step.py: carvekit at the FPR
#   authors' settings, each rank a share of the gallery images, copies written once), so notebook 11
#   reads the copies.
# - fpr-generate: FPR's personalization methods on every subject of the nine galleries
#   (nearid_lib/fpr/generation.py: subjects dealt over the ranks, each resumable by its _done.json;
#   the bytes do not depend on the number of processes), so notebook 11 ranks images instead of
#   generating them in its kernel on one GPU.
GPU_LAUNCH = $(if $(filter-out 0,$(N_GPUS)),$(VENV)/bin/torchrun --standalone --nproc_per_node $(N_GPUS),$(PY))
# $(1) step (a target of the resource ledger: nearid_lib/steps, `python -m nearid_lib.steps list`; the one
# runner places its models on the GPUs first and refuses a machine too small before loading any),
# $(2) what it reads, $(3) the notebook that waits for it (paper)
define gpu_step
$$(NB_OUT)/$(1).done: $(2) $$(LIB_SRC) $$(STAMP)
	mkdir -p $$(NB_OUT) && set -o pipefail && $$(GPU_LAUNCH) -m nearid_lib.steps run $(1) --profile $$(PROFILE) 2>&1 | tee $$(NB_OUT)/$(1).log
	@touch $$@
$(1): $$(NB_OUT)/$(1).done
ifeq ($$(PROFILE),paper)
$$(NB_OUT)/$(3).ipynb: $$(NB_OUT)/$(1).done
endif
endef
$(eval $(call gpu_step,curate,notebooks/01_data_curation.py,01_data_curation))
$(eval $(call gpu_step,prefill,$(call nb,01_data_curation),03_train_nearid))
# every head training of notebooks 03-07 over every GPU at once (notebook 03 alone keeps 3 busy)
$(eval $(call gpu_step,train-heads,$$(NB_OUT)/prefill.done,03_train_nearid))
$(eval $(call gpu_step,judge,$(call nb,01_data_curation),04_eval_nearid_bench))
# ID-Sim's open MLLM row (Table 2a) reads the public benchmarks only: no notebook before it
$(eval $(call gpu_step,idsim-judge,,09_train_idsim))
# FPR's galleries, built once by one process from the hand downloads (no notebook before it); the
# generators and background removal read them, so no rank waits while one builds
$(eval $(call gpu_step,fpr-galleries,,11_retrieval_galleries))
$(eval $(call gpu_step,fpr-generate,$$(NB_OUT)/fpr-galleries.done,11_retrieval_galleries))
# background removal of the same galleries' references and gallery images (FPR Table 14 is an oracle
# table: no generated image); after fpr-generate, so that one process builds the galleries at a time
$(eval $(call gpu_step,bgremove,$$(NB_OUT)/fpr-generate.done,11_retrieval_galleries))
# DreamBench++'s GPT score of every reference and generated image (network, no GPU; gated closed
# without a key or a reachable server), so notebook 11 reads answers instead of asking
$(eval $(call gpu_step,fpr-gpt,$$(NB_OUT)/fpr-generate.done,11_retrieval_galleries))

# ----- tests -----
# The layers ([tool.importlinter] of pyproject.toml: entry points > paper packages > core, no cycles) are
# checked first: a broken contract fails in seconds. pytest exits 5 when it collects no test:
# that is not a failure of the build.
lint-imports: $(STAMP)
	$(VENV)/bin/lint-imports

pytest: $(STAMP) lint-imports
	$(PY) -m pytest -q --durations=25 tests; rc=$$?; if [ $$rc -eq 5 ]; then echo "pytest: no tests collected"; rc=0; fi; exit $$rc

smoke: $(STAMP)
	$(MAKE) --no-print-directory -j$(NEARID_JOBS) --output-sync=target -o $(STAMP) notebooks PROFILE=smoke

# ----- the paper profile's dry run -----
# Every notebook with PROFILE=paper, reading a local hub mirror (NEARID_HUB_DIR) and the hand
# downloads (NEARID_DOWNLOADS), with the size-only overrides of tools/paper_fixtures (sizes and steps,
# never a code path). Without DRYRUN_HUB it writes a fixture mirror (published schemas, tiny models)
# to $(DRYRUN_DIR)/hub; DRYRUN_HUB=<dir> uses an existing mirror as it is (a partial real download,
# your own fixture), with DRYRUN_DOWNLOADS=<dir> for the hand downloads. Outputs stay under
# $(DRYRUN_DIR), never in the committed figures/.
DRYRUN_DIR ?= build/dryrun
# The dry run's notebooks and steps run DRYRUN_JOBS at a time, as smoke's do (tiny models on CPU: a
# notebook's outputs do not depend on what runs beside it); a GPU node's paper run keeps NEARID_JOBS=1.
DRYRUN_JOBS ?= 2
DRYRUN_HUB ?=
DRYRUN_DOWNLOADS ?= $(if $(DRYRUN_HUB),$(DRYRUN_DIR)/downloads-none,$(DRYRUN_DIR)/downloads)
DRYRUN_MIRROR := $(DRYRUN_DIR)/hub/.complete
DRYRUN_ENV = NEARID_HUB_DIR=$(abspath $(or $(DRYRUN_HUB),$(DRYRUN_DIR)/hub)) \
	NEARID_DOWNLOADS=$(abspath $(DRYRUN_DOWNLOADS)) NEARID_DATA=$(abspath $(DRYRUN_DIR)/data) \
	NEARID_CACHE=$(abspath $(DRYRUN_DIR)/cache) NEARID_OUT=$(abspath $(DRYRUN_DIR)/out) \
	NEARID_FIGURES=$(abspath $(DRYRUN_DIR)/figures) HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 \
	TRANSFORMERS_OFFLINE=1 NEARID_WORKERS=1 NEARID_ALLOW_CPU=1

$(DRYRUN_MIRROR): $(wildcard tools/paper_fixtures/*.py tools/tiny_models/*.py) nearid_lib/data/released.py nearid_lib/data/released_schema.py nearid_lib/mirror.py $(STAMP)
	rm -rf $(DRYRUN_DIR)/hub $(DRYRUN_DIR)/downloads
	HF_HUB_OFFLINE=1 $(PY) -m tools.paper_fixtures write $(DRYRUN_DIR)/hub $(DRYRUN_DIR)/downloads
	@touch $@

# The preflight runs first, with the run's settings: a damaged mirror (python -m
# tools.paper_fixtures damage HUB DOWNLOADS) fails here, before any notebook, naming each defect.
dryrun-paper: $(STAMP) $(if $(DRYRUN_HUB),,$(DRYRUN_MIRROR))
	env $(DRYRUN_ENV) NEARID_SET="$$(env $(DRYRUN_ENV) $(PY) -m tools.paper_fixtures overrides)" \
	  $(PY) -m nearid_lib preflight --profile paper $(if $(PREFLIGHT_ALLOW),--allow-missing $(PREFLIGHT_ALLOW))
	env $(DRYRUN_ENV) NEARID_SET="$$(env $(DRYRUN_ENV) $(PY) -m tools.paper_fixtures overrides)" \
	  $(MAKE) --no-print-directory -j$(DRYRUN_JOBS) --output-sync=target -o $(STAMP) notebooks PROFILE=paper \
	  NB_OUT=$(DRYRUN_DIR)/notebooks
	env $(DRYRUN_ENV) $(PY) -m tools.paper_fixtures check $(DRYRUN_DIR)/figures

# Every figure a notebook writes is shown in the cell that writes it: tests/test_notebook_figures.py
# reads the executed notebooks of smoke and of the dry run (papermill's cell times against each PNG's
# date), so it runs after them, not in the pytest run before them.
# Each of the two runs is checked when its executed notebooks exist (make test makes both first).
SMOKE_FIGURES = $(or $(NEARID_FIGURES),$(OUT_ROOT)/smoke/figures)
SMOKE_NB = $(OUT_ROOT)/smoke/notebooks
EXECUTED_RUNS = $(if $(wildcard $(SMOKE_NB)),$(abspath $(SMOKE_NB)):$(abspath $(SMOKE_FIGURES))) \
	$(if $(wildcard $(DRYRUN_DIR)/notebooks),$(abspath $(DRYRUN_DIR)/notebooks):$(abspath $(DRYRUN_DIR)/figures))
notebook-figures: $(STAMP)
	@test -n "$(strip $(EXECUTED_RUNS))" || { echo "notebook-figures: no executed notebooks (make smoke first)" >&2; exit 1; }
	NEARID_EXECUTED="$(subst $(eval) ,;,$(strip $(EXECUTED_RUNS)))" $(PY) -m pytest -q tests/test_notebook_figures.py -k executed

# pytest keeps about one of CI's two cores busy, so the dry run (its own folders under $(DRYRUN_DIR),
# one notebook at a time) and then smoke (two at a time, so that both cores stay busy once pytest
# ends) run beside it (the tests write their caches and runs to a temporary folder, tests/conftest.py,
# never to cache/ or build/); then the check of their executed notebooks' figures (seconds).
test: $(STAMP)
	$(MAKE) --no-print-directory -j2 -o $(STAMP) pytest dryrun-paper-then-smoke
	$(MAKE) --no-print-directory -o $(STAMP) notebook-figures

# The edit-test loop: the tests that build no world, start no process and run no notebook
# (tests/conftest.py marks the others heavy); make test runs everything.
test-fast: $(STAMP) lint-imports
	$(PY) -m pytest -q -m "not heavy and not slow" --durations=10 tests

dryrun-paper-then-smoke: $(STAMP)
	$(MAKE) --no-print-directory -o $(STAMP) dryrun-paper DRYRUN_JOBS=1
	$(MAKE) --no-print-directory -o $(STAMP) smoke

clean-build:
	rm -rf $(OUT_ROOT)/$(PROFILE)

clean:
	rm -rf build cache
