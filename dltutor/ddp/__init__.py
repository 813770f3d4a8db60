"""ddp: notebook 02 and lab 02 (course/labs/02_ddp): data parallelism with DDP.

  by_hand.py    gradient all-reduce written out (what DDP does for you)
  run_stats.py  end of lab 02's run: loss curve averaged over ranks, the slowest rank's time
  scaling.py    global batch, the linear LR rule, warm-up, weak/strong scaling efficiency
  scaling_quiz.py  Exercise 1's check: effective batch, scaled LR, warm-up steps (never the answer)
  batch_study.py  large global batches measured in one process: LR policies, steps to a target
  batch_report.py the sweep's tables and sentences; `python -m dltutor.ddp.batch_report`
  warmup_seeds.py warm-up or not over seeds: the mean difference per batch and its 95 % interval
  rounds.py     launches in rotated rounds: rates, efficiencies and step times over the rounds
  batch_reference.py  a labelled earlier full-mode reference sweep (stored numbers, not this run), its sentences
  findings.py   what this run's scaling, bucket and overlap numbers show, as printed sentences
  overlap_findings.py  the profiled step's terms: exposed communication, overlap fraction, contention
  multinode.py  a job across nodes: where its ranks ran, the same answer as on one node?
  timeline.py   one profiled DDP step: forward, backward, each bucket's all-reduce; overlap fraction
  plots.py      scaling efficiency, warm-up loss curves, step time vs buckets, the batch study
  exercise.py   the exercise's loop pieces, inside the ranks: data, model, checkpoint, report
  exercise_check.py  the exercise's check, in the kernel: launch, judge against one process
  exercise_judge.py  the exercise's judge: shards, reshuffles, averaged steps, one writer
"""
