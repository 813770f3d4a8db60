"""Notebook 09, first half (long sequences): attention split over the ranks along the sequence,
written by the course and checked against one process. Used by notebook 09 and lab
`09_long_context` (ring_attention.py).

  attention.py   one-process attention written out, one block with its log-sum-exp, the merge
  sharding.py    contiguous and zigzag shards of a sequence: shard, unshard, positions, checks
  ring.py        ring attention (K/V round the ring with batch_isend_irecv, a backward of its own),
                 the blocks-of-work and bytes formulas, the fused-logsumexp gradient trap
  ulysses.py     Ulysses: all-to-all from sequence shards to head shards and back; its bytes
  memory.py      attention's peak memory per rank, measured, beside the formula
  torch_cp.py    what torch's own context_parallel does (CPU: collectives seen or its error)
  runs.py        from the kernel: run the lab on 2 and 4 ranks, rows for every table
  findings.py    what the runs showed, as sentences (exactness, balance, bytes, memory, speed)
  plots.py       blocks per rank, bytes per rank, memory vs sequence length
  exercise_ring.py   exercise 09-ring-attention: the student's merge and ring on 3 ranks;
                     ring_judge.py: against one-process attention, the usual mistakes named
"""
