"""Solution of notebook 06's exercise `06-placement`: rank -> (tp, pp, dp) for any cluster.

Hidden from the notebook; the check runs it with `exercise_place.check(solution=True)`;
tests/test_exercises_model_parallel.py proves it passes, and tests/answers/06-placement/ holds the
wrong and right answers the check is tried on (tests/test_mutations_model_parallel.py).
"""


def place(rank, tp, pp, dp, gpus_per_node):
    # the ranks as the row-major array of shape (dp, pp, tp) that init_device_mesh builds:
    # tp varies fastest, so a TP group is tp consecutive ranks, inside one node when tp divides
    # gpus_per_node (the node's GPUs are numbered consecutively)
    return rank % tp, (rank // tp) % pp, rank // (tp * pp)
