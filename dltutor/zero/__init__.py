"""zero: notebook 04 and lab 04 (course/labs/04_deepspeed): ZeRO and out-of-core BERT with DeepSpeed.

  memory.py  the ZeRO memory formula per stage, and what a run really held
  estimates.py  DeepSpeed's own ZeRO-3 estimator beside the formula: its terms, called one by one
  budget.py  an OS-enforced memory budget, so "out of memory" happens for real on a CPU
  bert.py    the BERT-style masked-LM model of the seed, synthetic token batches
  bert_lab.py  what the two BERT labs share: flags, DeepSpeed config loading, memory report
  swap_buffers.py  NVMe offload's page-locked swap buffers: what DeepSpeed locks, sized to the
                   process's `ulimit -l` (or one clear error before DeepSpeed starts)
  fsdp.py    PyTorch's own sharding (FSDP2, fully_shard) on the same BERT: run, bytes held, formula
  runs.py    from the kernel: launch the DeepSpeed and FSDP2 labs and turn their reports into rows
  rows.py    one row from a rank's report: memory per rank, the formula, samples/s ± its 95 % CI
  rounds.py  the stage sweep in rotated rounds: throughput per round, warm-up round left out,
             the ratio to stage 0 paired within each round (geometric mean, 95 % CI)
  speed.py   the speed verdicts: the paired ratio first, the unpaired means as an illustration
  plots.py   the memory stack per stage, predicted vs measured, samples/s, loss curves
  findings.py  the sentences of "what this run shows": fit on paper, budget, ratios, speed, FSDP2
  exercise_memory.py  exercise 04-memory: the student's model-state formula, checked on unseen
                      (p, d, stage) against memory.estimate_zero_memory, then the GPUs it asks
  exercise_zero1.py   exercise 04-zero1: ZeRO-1 by hand on 2 gloo ranks (the check the notebook calls)
  exercise_zero1_ranks.py  its harness inside the ranks: two models, reports of parameters and
                      of the Adam state each rank holds
  exercise_zero1_judge.py  its judge: every rank against one process's torch.optim.Adam, the
                      Adam state's bytes and the slice of the flat vector it covers
"""
