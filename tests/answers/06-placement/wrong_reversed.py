# expect: wrong
# names: return them in the order \(tp, pp, dp\)
# why: the right layout, but returned as (dp, pp, tp)
def place(rank, tp, pp, dp, gpus_per_node):
    return rank // (tp * pp), (rank // tp) % pp, rank % tp
