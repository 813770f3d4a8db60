"""core: what every topic shares; imports nothing else from dltutor.

  env.py       fast mode, sizes (`pick`), seeding, cores, the cache and data folders
  device.py    the one device/backend choice, precision (bf16/fp16/fp32), GPU-safe timing
  dist.py      inside a launched rank: rank, local_rank, world_size, process group, metrics lines
  hosts.py     which rank runs on which node: every rank's host, 'node(s) x rank(s)', a job's first node
  rendezvous.py  before a rank joins: MASTER_ADDR resolves, MASTER_PORT free on rank 0 (one message)
  rank_exit.py how a rank leaves after a clean teardown (os._exit with its own exit code)
  course.py    where the course's labs and site profiles are (`DLTUTOR_COURSE`), tagged lines
  flags.py     the argument layer of every lab and the CLI (checked types, `--tiny` presets)
  train_step.py  one forward/backward/optimizer step, used by every training loop
  engines.py   Horovod and DeepSpeed: installed? built with what? the env their ranks need
  units.py     KiB/MiB/GiB and byte formatting/parsing
  tables.py    the one plain-text table formatter
  findings.py  the sentences that say what this run showed, from its numbers ('inconclusive here'
               inside the run's spread), shown as a list in Jupyter
  spread.py    the course's '±': the 95 % confidence interval of a mean over repeats (scipy t)
  rounds.py    set-ups compared in turns: each round runs every set-up once, the order rotated
  plots.py     honest plot labels (data, CPU/GPU, fast mode) and side-by-side bars
  sources.py   every figure and log line quoted from the seeds (the talks), with its seed line
  gpu_dryrun.py  tests only: run lab code as rank r of an NCCL job on a CPU machine (fake CUDA
               tensors; every tensor handed to torch.distributed checked for the rank's GPU)
Used by all notebooks and labs.
"""
