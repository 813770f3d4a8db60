"""allreduce: notebook 05 and lab 05 (course/labs/05_allreduce): ring all-reduce, seen and measured.

  ring.py         the step model: who holds which chunk after every step (the seed's labels)
  cost.py         alpha-beta cost models, their fits, nccl-tests' algbw/busbw
  collectives.py  ring and other all-reduces from point-to-point messages, checked against torch's
  visualizer.py   the ring widget (ipywidgets) and the plots of notebook 05
  exercise.py     the exercise: one reduce-scatter step on p2p, run on 3 ranks, checked
"""
