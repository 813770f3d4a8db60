# expect: wrong
# names: rank \d+ got pp = \d+, but pp counts 0 \.\. \d+|both got \(tp, pp, dp\)
# why: written as if tp == pp: right only for square shapes
def place(rank, tp, pp, dp, gpus_per_node):
    return rank % tp, (rank // tp) % tp, rank // (tp * tp)
