# expect: wrong
# names: TP group\(s\) span two nodes.*TP group of ranks \[0, 4\] is on nodes \[0, 1\]
# why: tp outermost: a TP group's ranks are a whole pp x dp block apart, on different nodes
def place(rank, tp, pp, dp, gpus_per_node):
    return rank // (pp * dp), rank % pp, (rank // pp) % dp
