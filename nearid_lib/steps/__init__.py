"""The operations of a GPU run, apart from the notebooks: the resource ledger of every GPU-heavy
step (:mod:`.ledger`), the GPUs a plan is made for (:mod:`.gpus`), the placement of large models
(:mod:`.placement`) and the plan of a run on a machine (:mod:`.plan`, ``nearid plan --gpus 8xA100-40GB``)."""
from .gpus import KINDS, GpuKind, parse_gpus, visible_gpus
from .ledger import Cost, ModelUse, Sizes, Step, all_steps, register_step, step
from .placement import ReplicaPlan, device_kwargs, model_bytes, model_size, plan_replicas, replica_of
from .plan import StepPlan, plan_run, plan_step, render_markdown, render_text

__all__ = ["KINDS", "GpuKind", "parse_gpus", "visible_gpus", "Cost", "ModelUse", "Sizes", "Step", "all_steps",
           "register_step", "step", "ReplicaPlan", "device_kwargs", "model_bytes", "model_size", "plan_replicas",
           "replica_of", "StepPlan", "plan_run", "plan_step", "render_markdown", "render_text"]
