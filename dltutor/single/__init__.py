"""single: notebook 01 and lab 01 (course/labs/01_cifar10): one device, made fast.

  models.py  the CIFAR ResNet (and torchvision's ResNet-50), parameter counts
  train.py   train/evaluate loops, History, checkpoint/resume, `fit`
  speed.py   images/s of several set-ups side by side (workers, on-device data, AMP, compile)
  interleave.py  times those set-ups in turns (rounds, order rotated), so machine noise hits all alike
  plots.py   training curves, image grids, the per-epoch table
  findings.py  what this run showed (speed variants, curves, batch sizes) as printed sentences
  exercise.py  the batch-size exercise's check: watches the student's measure() and re-runs it
  watch.py     what one measure() call trained: the model's size, the batches, backward, step
  timing.py    the student's img/s against the check's, alternated, decided by t-intervals
  ladder.py    the fast path one knob at a time (bench_time_to_accuracy --ladder) and the GPU
               record's table and sentences that notebook 01 prints
"""
