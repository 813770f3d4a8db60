"""Notebook 06 (model parallelism): tensor and pipeline parallelism, and how they compose with data
parallelism (3D). Used by notebook 06 and lab `06_model_parallel`.

  tensor.py      Megatron-style TP written out: column- then row-parallel layers, f and g, byte count
  dtensor_tp.py  torch's own TP (DeviceMesh, DTensor, ColwiseParallel/RowwiseParallel) for the same blocks
  pipeline.py    stages, GPipe/1F1B via torch.distributed.pipelining, timed stages, the bubble
  mesh.py        3D: rank -> (tp, pp, dp) as DeviceMesh lays it out, node boundaries, bytes per form
  runs.py        from the kernel: run the two lab scripts, tables (incl. a strategy table adapted from seed 003)
  findings.py    what the runs showed, as sentences: TP checks and timings (paired), the real-compute run
  bubble_findings.py  the pipeline sentences: bubble vs m and vs (p-1)/(m+p-1), GPipe vs 1F1B
                 (paired), what a stage held; each labelled with its stage work
  plots.py       timeline, bubble vs micro-batches, TP checks, bytes per form
  load.py        the 1-minute load average around each timed launch, beside the cores
  exercise_tp.py     exercise 06-tensor-parallel: the student's Megatron MLP on 2 ranks, given only
                     its slices; exercise_tp_judge.py: against the one-process MLP (outputs,
                     gradients, one all-reduce each way), the known mistakes named
  exercise_pp.py     exercise 06-pipeline: the student's GPipe forward over 2 stages, given only its
                     stage, recorded in program order (p2p_watch.py: stage runs, irecv waits, each
                     message checked against its peer's); exercise_pp_judge.py: losses against one
                     process, what crossed, and that the stages overlap
  exercise_place.py  exercise 06-placement: the student's place(rank, tp, pp, dp, gpus_per_node) on
                     unseen cluster shapes (whole numbers, mesh.check_placement), then seed 001's job
  exercise_batch.py  many answers of 06-tensor-parallel / 06-pipeline judged in one launch of 2 ranks
                     (an instructor's folder of submissions, the course's mutation tests)
"""
