"""ddp: notebook 02 and lab 02 (course/labs/02_ddp): data parallelism with DDP.

  by_hand.py    gradient all-reduce written out (what DDP does for you)
  run_stats.py  end of lab 02's run: loss curve averaged over ranks, the slowest rank's time
  scaling.py    global batch, the linear LR rule, warm-up, weak/strong scaling efficiency
  plots.py      scaling efficiency, warm-up loss curves, step time vs buckets
"""
