"""Notebook 07 (the input pipeline): data formats on disk, loaders, sharding and staging, and when
the device starves. Used by notebook 07 and lab `07_io`.

  source.py    the real Fashion-MNIST idx files (never a synthetic stand-in)
  formats.py   one subset written as small PNG files, tar shards, a numpy memmap, HDF5; a reader each
  measure.py   read throughput, time-to-first-batch, page-cache drop and residency, staging copy
  sharding.py  file-level shards per rank vs DistributedSampler, coverage and balance checks
  starve.py    the training step fed by a pipeline: data wait vs compute, the exercise's check
  exercise_shards.py  the file-sharding exercise: shards, the ranks' loop (run), the check
  shards_judge.py     what that check decides from the ranks' reports (coverage, balance, order)
  bench.py     the notebook's and lab's measurements, one call each
  rounds.py    compared set-ups in interleaved, repeated passes; the interval over passes; load average
  runs.py      lab 07_io on N ranks from the kernel, rows from its reports
  findings.py  what this run measured, as sentences with its spreads (formats, workers, staging)
  findings_steps.py  the same for the step timelines (starving, pipelines, the exercise)
  plots.py     formats, workers/prefetch, sharding, staging and timeline plots
"""
