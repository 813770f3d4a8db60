"""Notebook 09, second half (many experts): a mixture-of-experts layer and expert parallelism,
written by the course and checked against one process. Used by notebook 09 and lab
`09_long_context` (moe.py).

  gating.py      top-k routing, capacity (Megatron-LM's formula), dropped slots, the load-balancing loss
  layer.py       the one-process MoE layer (gate, expert MLPs, a logit bias to skew it)
  parallel.py    ExpertParallelMoE: count exchange, dispatch and combine with all_to_all_single
  exactness.py   expert parallelism vs one process (fp64): the cases the lab's --check and tests run
  anatomy.py     one layer on one process: where tokens go, what capacity drops, active parameters
  training.py    in-rank: the course's or DeepSpeed's layer behind one interface, the sweeps
  deepspeed_moe.py  deepspeed.moe.layer.MoE built with the course layer's weights; how it differs
  runs.py        from the kernel: run moe.py, rows for load, drops, straggler, all-to-all fit
  findings.py    what the runs showed, as sentences decided with 95 % intervals
  plots.py       load over steps, drops vs capacity, per-rank imbalance, all-to-all vs α-β
  exercise_dispatch.py  exercise 09-moe-dispatch: the student's dispatch and combine on 2 ranks;
                        dispatch_judge.py: against the one-process MoE, the usual mistakes named
"""
