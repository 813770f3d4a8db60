# expect: wrong
# names: TP group\(s\) span two nodes.*your dp changes
# why: dp innermost: consecutive ranks are data-parallel replicas, TP groups stride by dp
def place(rank, tp, pp, dp, gpus_per_node):
    return (rank // dp) % tp, rank // (dp * tp), rank % dp
