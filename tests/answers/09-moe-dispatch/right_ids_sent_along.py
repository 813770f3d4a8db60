# expect: solved
# why: counts per destination rank only, the expert ids sent along in a second int64 all-to-all, rows sorted by rank with sort(), each expert applied through a mask, index_add_ for the weighted sum
import torch
import torch.distributed as dist
from torch.distributed import all_to_all_single

from dltutor.experts.exercise_dispatch import run


def moe(x, experts, weights, expert, num_experts):
    me, p = dist.get_rank(), dist.get_world_size()
    owner = experts // (num_experts // p)               # [T, k]: the rank of each choice
    token = torch.arange(x.shape[0]).unsqueeze(1).expand_as(experts).reshape(-1)
    dest, perm = torch.sort(owner.reshape(-1), stable=True)
    send_counts = torch.bincount(dest, minlength=p)
    recv_counts = torch.zeros_like(send_counts)
    all_to_all_single(recv_counts, send_counts)
    s, r = send_counts.tolist(), recv_counts.tolist()
    ids = torch.zeros(sum(r), dtype=torch.long)
    all_to_all_single(ids, experts.reshape(-1)[perm], output_split_sizes=r, input_split_sizes=s)
    got = torch.zeros(sum(r), x.shape[1], dtype=x.dtype)
    all_to_all_single(got, x[token[perm]], output_split_sizes=r, input_split_sizes=s)
    res = torch.zeros_like(got)
    for e in ids.unique().tolist():
        sel = ids == e
        res[sel] = expert(e, got[sel])
    ret = torch.zeros(sum(s), x.shape[1], dtype=x.dtype)
    all_to_all_single(ret, res, output_split_sizes=s, input_split_sizes=r)
    w = weights.reshape(-1)[perm].unsqueeze(1)
    return torch.zeros_like(x).index_add_(0, token[perm], ret * w)


if __name__ == "__main__":
    run(moe)
