# expect: solved
# why: int() of a true division floors a non-negative rank: whole numbers, the reference layout
def place(rank, tp, pp, dp, gpus_per_node):
    tp_index = rank - tp * int(rank / tp)
    stage = int(rank / tp) % pp
    replica = int(rank / (tp * pp))
    return (tp_index, stage, replica)
