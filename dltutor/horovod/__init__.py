"""horovod: notebook 03 and lab 03 (course/labs/03_horovod): Horovod's synthetic ResNet-50 benchmark.

  benchmark.py  what the Horovod lab and its DDP twin share: flags, model, timing, printed lines
  world.py      the world Horovod sees vs the tasks its launcher started (srun + Gloo: refused)
  runs.py       from the kernel: run either lab, read its lines, tabulate, sweep a setting
  rounds.py     Horovod, DDP and the sweep values launched in turns; a set-up's row over its launches
  paired.py     two set-ups compared round by round: a ratio per round, its 95 % CI over the rounds
  paired_plots.py  launches per round and the paired intervals the verdicts use
  plots.py      the Horovod timeline, fusion and cycle-time sweeps, engine and scaling bars
  exercise.py   the write-Horovod's-lines exercise: launch the student's script, judge it
  findings.py   what this run showed (scaling, engines, sweeps, timeline) as printed sentences
"""
