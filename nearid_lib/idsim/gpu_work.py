"""ID-Sim's GPU-heavy step in the resource ledger: the open MLLM judge row (``idsim.mllm_judge``,
ID-Sim Table 2a's MLLM row) over its public benchmarks, at most ``idsim.mllm_max_pairs`` graded pairs
of each (Subjects2k and DreamBench++), as :func:`~nearid_lib.idsim.released.score_released` asks."""
from __future__ import annotations

from ..judge.plan import JUDGE_SECONDS_PER_PAIR
from ..steps.ledger import Cost, ModelUse, Step, register_step

__all__ = []

# the judge's answer here is a ~30-token JSON object, not NearID's ~260-token one: App. D's per-pair
# time scaled by the answer's length, plus the two images' prefill (taken as a quarter of a pair)
_SECONDS = JUDGE_SECONDS_PER_PAIR * (30 / 260 + 0.25)


def _pairs(s, cfg) -> int:
    cap = cfg.idsim.mllm_max_pairs if cfg is not None else 200
    # Subjects2k's pairs (thousands: the cap binds) and DreamBench++'s rated generations, each capped
    dbpp = s.dbpp_generations if cap is None else min(int(cap), s.dbpp_generations)
    return int(cap if cap is not None else s.dbpp_generations) + dbpp


register_step(Step(
    name="idsim-mllm", command="make idsim-judge", target="idsim-judge", entry="nearid_lib.idsim.judge_step",
    feeds="ID-Sim Table 2a's open MLLM row",
    models=(ModelUse("Qwen/Qwen3-VL-30B-A3B-Instruct"),),
    models_of=lambda cfg: [cfg.idsim.mllm_judge] if cfg.idsim.mllm_judge else [],
    items=_pairs, item="pairs",
    cost=Cost(_SECONDS, "A100-80GB", "memory", "projected",
              f"NearID App. D's {JUDGE_SECONDS_PER_PAIR:.1f} s a pair scaled to a ~30-token answer, plus the prefill"),
    resume="answers appended per pair under $NEARID_CACHE/paper/judge_answers; a rerun judges only the rest",
    outputs="ID-Sim judge answers", skip="NEARID_SET=idsim.mllm_judge=none"))
