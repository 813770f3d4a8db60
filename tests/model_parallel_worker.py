"""Worker for tests/test_model_parallel.py: lab 06's tensor-parallel and pipeline runs in ONE
process group (one launch, --tiny), each rank reporting both. Rank 0 first places a 32-rank
(dp, pp, tp) DeviceMesh on torch's fake process group, so the test can compare torch's layout
with dltutor.model_parallel.mesh.reference_coords."""
import importlib.util

from dltutor.core import dist as ddist
from dltutor.core.course import lab

FAKE_RANKS = (0, 5, 13, 22, 31)


def load(relative):
    spec = importlib.util.spec_from_file_location(f"lab_{relative.split('/')[-1][:-3]}", lab(relative))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def torch_mesh_coords(shape=(2, 4, 4)):
    """rank -> (tp, pp, dp) as init_device_mesh((dp, pp, tp)) places it, for FAKE_RANKS."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore
    out = {}
    for r in FAKE_RANKS:
        dist.init_process_group("fake", store=FakeStore(), rank=r, world_size=32)
        d, p, t = init_device_mesh("cpu", shape, mesh_dim_names=("dp", "pp", "tp")).get_coordinate()
        out[r] = (t, p, d)
        dist.destroy_process_group()
    return out


def main():
    tp, pp = load("06_model_parallel/tp_mlp.py"), load("06_model_parallel/pipeline.py")
    info = ddist.detect()
    mesh = torch_mesh_coords() if info["rank"] == 0 else {}
    with ddist.session() as ctx:
        t = tp.run(tp.parse_args(["--tiny"]), ctx)
        p = pp.run(pp.parse_args(["--tiny", "--work", "sleep", "--sleep-ms", "5",
                                  "--microbatches", "1,2,4"]), ctx)
        ddist.report(tp=t, pp=p, mesh={str(k): v for k, v in mesh.items()})


if __name__ == "__main__":
    main()
