"""allreduce: notebook 05 and lab 05 (course/labs/05_allreduce): ring all-reduce, seen and measured.

  ring.py          the step model: who holds which chunk after every step (the seed's labels)
  cost.py          alpha-beta cost models (flat and hierarchical), their fits, nccl-tests' algbw/busbw
  collectives.py   ring and other all-reduces from point-to-point messages, checked against torch's
  hierarchical.py  process groups for "nodes" and the hierarchical (2-D) all-reduce built on them
  link.py          the bytes an all-reduce puts on the link between nodes, counted by their interfaces
  sweep.py         what both labs share: the timing passes, result rows, process group, launch
  findings.py      the sentences notebook 05 prints about what this run measured
  paired.py        algorithms compared paired over the passes (ratio per pass), disturbed passes
  sweep_table.py   the printed sweep tables: fastest, median and slowest pass, named
  fitcheck.py      whether the fitted alpha-beta model describes the run, and what is printed from it
  limits.py        the model's small- and large-D ratios, which need no fitted alpha or beta
  landscape.py     the communication libraries of seed 000 (MPI, NCCL, RCCL, oneCCL, Gloo)
  visualizer.py    the ring widget (ipywidgets) and the plots of notebook 05
  exercise.py      the exercise: one reduce-scatter step on p2p, run on 3 then 4 ranks, checked
  exercise_judge.py  its judge: each step's messages (one chunk, to the right) and chunks vs the model
  param_server.py  a parameter server beside ring all-reduce (lab ps_bench.py)
  ps_findings.py   what section 8a's run shows, paired per pass
  async_sgd.py     asynchronous SGD's stale gradients, simulated in one process
"""
