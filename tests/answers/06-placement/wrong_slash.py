# expect: wrong
# names: whole numbers.*use // \(floor division\), not /
# why: / instead of //: the coordinates come out as floats (0.5, 1.0), which int() would hide
def place(rank, tp, pp, dp, gpus_per_node):
    return rank % tp, (rank / tp) % pp, rank / (tp * pp)
