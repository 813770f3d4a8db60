# expect: wrong
# names: rank \d+ got tp = \d+, but tp counts 0 \.\. \d+
# why: the GPU's index in its node taken for its TP coordinate (gpus_per_node for tp)
def place(rank, tp, pp, dp, gpus_per_node):
    return rank % gpus_per_node, (rank // tp) % pp, rank // (tp * pp)
