# expect: wrong
# names: TP group\(s\) span two nodes.*your pp changes
# why: tp and pp swapped in the order: pp varies fastest, so a TP group strides across nodes
def place(rank, tp, pp, dp, gpus_per_node):
    return (rank // pp) % tp, rank % pp, rank // (tp * pp)
