"""Notebook 06 (model parallelism): tensor and pipeline parallelism, and how they compose with data
parallelism (3D). Used by notebook 06 and lab `06_model_parallel`.

  tensor.py      Megatron-style TP written out: column- then row-parallel layers, f and g, byte count
  dtensor_tp.py  torch's own TP (DeviceMesh, DTensor, ColwiseParallel/RowwiseParallel) for the same blocks
  pipeline.py    stages, GPipe/1F1B via torch.distributed.pipelining, timed stages, the bubble
  mesh.py        3D: rank -> (tp, pp, dp) as DeviceMesh lays it out, node boundaries, bytes per form
  runs.py        from the kernel: run the two lab scripts, tables (incl. a strategy table adapted from seed 003)
  findings.py    what the runs showed, as sentences: TP checks, bubble vs (p-1)/(m+p-1), 1F1B's memory
  plots.py       timeline, bubble vs micro-batches, TP checks, bytes per form
"""
