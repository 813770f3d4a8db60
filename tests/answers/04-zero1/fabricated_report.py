# expect: wrong
# names: no rank's parameters changed
# why: reports what a ZeRO-1 run would (the initial parameters, half of one process's Adam bytes) without training
from dltutor.core import dist
from dltutor.zero import exercise_zero1 as ex
from dltutor.zero import exercise_zero1_judge as judge
import os

seed = int(os.environ.get(ex.SEED_ENV, "0"))
with dist.session() as ctx:
    for s in ex.run_seeds(seed):
        params = ex.flat(ex.build_model(s))
        _, full, _ = judge.reference(s)
        for step in range(1, ex.STEPS + 1):
            dist.report(event="zero1_step", step=step, seed=s, params=params,
                        state_bytes=full // 2, state_elems=params.numel() // 2 + ctx.rank)
