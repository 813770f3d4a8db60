# expect: wrong
# names: on 2 nodes x 4 GPUs, TP=2 PP=2 DP=2.*rank \d+ got (tp|pp) = \d+, but
# why: written for seed 001's 32-GPU job alone (TP = PP = 4 typed in)
def place(rank, tp, pp, dp, gpus_per_node):
    return rank % 4, (rank // 4) % 4, rank // 16
