# expect: solved
# why: Megatron's order (tp fastest, then dp, pp outermost): another layout that keeps TP in a node
def place(rank, tp, pp, dp, gpus_per_node):
    rest, t = divmod(rank, tp)
    p, d = divmod(rest, dp)
    return [t, p, d]
