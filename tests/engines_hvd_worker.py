"""One Horovod rank for tests/test_engines.py: all-reduce (sum and average), broadcast, allgather.

Launched as:  horovodrun -np 2 -H localhost:2 --gloo python tests/engines_hvd_worker.py
Each rank checks the results itself and prints one line `HVD_RESULT {json}`; any wrong value
raises, so the rank exits non-zero and horovodrun fails.
"""
import json

import torch
import horovod.torch as hvd

hvd.init()
rank, size = hvd.rank(), hvd.size()
torch.set_num_threads(1)

# rank r contributes (r + 1) * [1, 2, 3, 4]
x = (rank + 1) * torch.arange(1, 5, dtype=torch.float32)
total = hvd.allreduce(x, op=hvd.Sum, name="sum")
mean = hvd.allreduce(x, op=hvd.Average, name="avg")
ranks_sum = size * (size + 1) / 2                     # 1 + 2 + ... + size
expect_sum = ranks_sum * torch.arange(1, 5, dtype=torch.float32)
assert torch.allclose(total, expect_sum), f"rank {rank}: sum {total.tolist()} != {expect_sum.tolist()}"
assert torch.allclose(mean, expect_sum / size), f"rank {rank}: average {mean.tolist()}"

root_value = hvd.broadcast(torch.full((3,), float(rank + 10)), root_rank=0, name="bcast")
assert torch.equal(root_value, torch.full((3,), 10.0)), f"rank {rank}: broadcast {root_value.tolist()}"

gathered = hvd.allgather(torch.tensor([[float(rank)]]), name="gather")
assert gathered.flatten().tolist() == [float(r) for r in range(size)], f"rank {rank}: {gathered}"

print("HVD_RESULT " + json.dumps({"rank": rank, "size": size, "sum": total.tolist(),
                                  "avg": mean.tolist(), "gloo": hvd.gloo_enabled()}), flush=True)
hvd.shutdown()
