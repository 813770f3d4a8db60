"""`make gpu-check` (scripts/gpu_check.py, scripts/gpu_record.py): on this GPU-less machine it must
say so and fail; its record writer and README link are checked with a made-up result list."""
from __future__ import annotations

import json
import subprocess
import sys

import nbformat
import pytest

from dltutor.core.course import course_root

SCRIPTS = course_root().parent / "scripts"
sys.path.insert(0, str(SCRIPTS))
import gpu_check  # noqa: E402
import gpu_record  # noqa: E402
from gpu_record import Result  # noqa: E402

INFO = dict(host="gpu-node-7", date="2026-11-23T19:30+00:00", python="3.12.3",
            python_path="/usr/bin/python3", torch="2.11.0+cu130", cuda="13.0", gpus=2,
            gpu_names=["NVIDIA H100 80GB HBM3"] * 2, capability="9.0", nccl="2.27.7",
            driver="580.65", torchvision=None, deepspeed=None, horovod="0.28.1", papermill=None,
            nbclient="0.10.2", ipykernel="6.29.5")
RESULTS = [
    Result("02_ddp/train.py", "lab", "pass", 0.8, {"img_per_s": 5120.3, "hardware": "GPU/nccl"},
           "2 rank(s), local"),
    Result("04_deepspeed/train_bert_ds.py zero3", "lab", "not run: deepspeed missing"),
    Result("05_allreduce/allreduce_bench.py", "lab", "fail", 0.2, {}, "rank 1 failed | NCCL"),
    Result("04_deepspeed_out_of_core_bert", "notebook", "pass", 1.5, {}, "fast mode"),
]


def test_without_a_gpu_it_says_so_in_one_line_and_fails(capsys, tmp_path):
    assert gpu_check.main(["--out", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "NO GPU visible" in out and "nothing was verified" in out
    assert not list(tmp_path.iterdir())                                   # no record written


def test_make_gpu_check_fails_too_and_a_python_without_torch_is_named():
    make = subprocess.run(["make", "-s", "gpu-check", f"PY={sys.executable}"],
                          cwd=course_root().parent, capture_output=True, text=True, timeout=120)
    assert make.returncode != 0 and "NO GPU visible" in make.stdout
    bare = subprocess.run([sys.executable, "-S", str(SCRIPTS / "gpu_check.py")],
                          capture_output=True, text=True, timeout=60)   # -S: no site-packages
    assert bare.returncode == 2 and "cannot import torch" in bare.stdout


def test_the_record_holds_versions_results_and_numbers(tmp_path):
    md, js = gpu_record.write_record(INFO, RESULTS, tmp_path)
    assert md.name == "2026-11-23-gpu-node-7.md" and js.name == "2026-11-23-gpu-node-7.json"
    text = md.read_text()
    assert "1 pass" not in text and "2 pass, 1 fail, 1 not run" in text
    assert "| deepspeed | not installed |" in text and "| horovod | 0.28.1 |" in text
    assert "| driver | 580.65 |" in text and "2 x NVIDIA H100 80GB HBM3" in text
    assert ("| lab `04_deepspeed/train_bert_ds.py zero3` | not run: deepspeed missing | 0.0 | - |"
            in text)
    assert "img_per_s=5120.3" in text and "rank 1 failed / NCCL" in text   # '|' kept out of cells
    data = json.loads(js.read_text())
    assert data["facts"]["torch"] == "2.11.0+cu130"
    assert [r["status"] for r in data["results"]] == [r.status for r in RESULTS]


def test_the_readme_line_points_at_the_record(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("intro\n\n**Last verified on a GPU:** not yet verified on a GPU.\n\nmore\n")
    md, _ = gpu_record.write_record(INFO, RESULTS, tmp_path / "docs" / "verified")
    assert gpu_record.update_readme(readme, md, INFO, RESULTS)
    line = readme.read_text().splitlines()[2]
    assert line == ("**Last verified on a GPU:** [2026-11-23, gpu-node-7, 2 x NVIDIA H100 80GB "
                    "HBM3](docs/verified/2026-11-23-gpu-node-7.md): 2 pass, 1 fail, 1 not run.")
    assert not gpu_record.update_readme(tmp_path / "docs" / "verified" / md.name, md, INFO, [])
    real = (course_root().parent / "README.md").read_text()
    assert gpu_record.README_MARK in real   # the line the script rewrites exists


def test_a_missing_engine_is_not_run_never_pass(tmp_path):
    job = gpu_check.Job("04_deepspeed/train_bert_ds.py zero1", SCRIPTS / "x.py", ["--tiny"], 2,
                        needs=["deepspeed_not_installed_here"])
    r = gpu_check.run_lab(job, timeout=10, log_root=tmp_path)
    assert r.status == "not run: deepspeed_not_installed_here missing" and not r.numbers


def test_every_lab_runs_on_all_gpus_with_its_engine_named():
    jobs = {j.name: j for j in gpu_check.lab_jobs(4)}
    assert jobs["01_cifar10/train.py"].nproc == 1
    assert jobs["02_ddp/train.py"].nproc == 4 and jobs["02_ddp/train.py"].backend == "local"
    hvd = jobs["03_horovod/pytorch_synthetic_benchmark.py"]
    assert hvd.backend == "horovod" and "horovod" in hvd.needs
    stages = [n for n in jobs if n.startswith("04_deepspeed/train_bert_ds.py")]
    assert len(stages) == 4 and all("deepspeed" in jobs[n].needs for n in stages)
    assert "deepspeed" not in jobs["04_deepspeed/train_bert.py"].needs
    assert all("--tiny" in j.args for j in jobs.values())


@pytest.mark.parametrize("metrics, want", [
    ([{"img_sec_per_worker": 100.0}, {"img_sec_per_worker": 98.0}], {"img_per_s": 198.0}),
    ([{"global_img_per_s": 512.04, "data": "SYNTHETIC"}], {"img_per_s": 512.0, "data": "SYNTHETIC"}),
    ([{"results": [{"busbw_GBps": 1.5}, {"busbw_GBps": 80.25}]}], {"busbw_GBps_max": 80.25}),
    ([{"stage": 3, "model_state_bytes": {"total": 3 * 2**20}, "max_memory_allocated": 2**21,
       "samples_per_s": 41.0}],
     {"stage": 3, "model_states_MiB": 3.0, "gpu_peak_MiB": 2.0, "samples_per_s": 41.0}),
])
def test_key_numbers(metrics, want):
    assert gpu_check.key_numbers(metrics) == want


def test_a_notebook_whose_engine_is_missing_is_not_run(monkeypatch, tmp_path):
    import os
    for var in ("DLTUTOR_FAST", "PYTHONPATH"):          # run_notebooks sets them: restore after
        monkeypatch.setenv(var, os.environ.get(var, ""))
    ran = []
    monkeypatch.setattr(gpu_check, "notebook_runner",
                        lambda kernel: (lambda path, out, timeout: ran.append(path.name), "", "k"))
    monkeypatch.setattr(gpu_check, "missing", lambda needs: [m for m in needs if m == "deepspeed"])
    results = {r.name: r.status for r in gpu_check.run_notebooks(None, 10, tmp_path)}
    assert results["04_deepspeed_out_of_core_bert"] == "not run: deepspeed missing"
    assert results["02_ddp_multi_gpu"] == "pass" and "04_deepspeed_out_of_core_bert.ipynb" not in ran


def test_only_picks_labs_and_notebooks_by_name(monkeypatch, tmp_path):
    import os
    for var in ("DLTUTOR_FAST", "PYTHONPATH"):
        monkeypatch.setenv(var, os.environ.get(var, ""))
    monkeypatch.setattr(gpu_check, "notebook_runner",
                        lambda kernel: (lambda path, out, timeout: None, "", "k"))
    monkeypatch.setattr(gpu_check, "missing", lambda needs: [])
    import re
    wanted = re.compile(r"^0[56]").search
    names = [r.name for r in gpu_check.run_notebooks(None, 10, tmp_path, wanted)]
    assert names == ["05_ring_allreduce_visualizer", "06_model_parallelism"]
    gen = gpu_check.run_notebooks(None, 10, tmp_path)
    assert next(gen).name.startswith("01_")               # a row as soon as its notebook ran


def _record(tmp_path, name, results):
    info = {**INFO, "date": "2026-11-26T13:10+00:00"}
    md, js = gpu_record.write_record(info, results, tmp_path / name)
    return js


def test_merged_checks_keep_the_later_row_and_say_so(tmp_path, monkeypatch):
    first = _record(tmp_path, "a", [Result("08_debugging/faulty_train.py", "lab", "fail", 0.1),
                                    Result("02_ddp/train.py", "lab", "pass", 0.2)])
    second = _record(tmp_path, "b", [Result("08_debugging/faulty_train.py", "lab", "pass", 0.1, {},
                                            "1 rank(s), local")])
    info, rows = gpu_record.merge([first, second])
    assert [r.name for r in rows] == ["08_debugging/faulty_train.py", "02_ddp/train.py"]
    assert rows[0].status == "pass" and rows[0].detail.startswith("after fail in an earlier check")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1"),
                                         nbformat.v4.new_code_cell("2")])
    nb.cells[0].execution_count = 1
    path = tmp_path / "02_ddp_multi_gpu.ipynb"
    nbformat.write(nb, path)
    assert gpu_record.notebook_result(path).status == "fail"          # a cell never ran
    nb.cells[1].execution_count = 2
    nbformat.write(nb, path)
    assert gpu_record.notebook_result(path).status == "pass"
    nb.cells[1].outputs = [nbformat.v4.new_output("error", ename="E", evalue="x", traceback=[])]
    nbformat.write(nb, path)
    assert gpu_record.notebook_result(path).status == "fail"
    readme = tmp_path / "README.md"
    readme.write_text(f"x\n{gpu_record.README_MARK} none yet\n")
    m = tmp_path / "m.json"
    m.write_text(json.dumps(MATMUL))
    assert gpu_record.main(["merge", str(first), str(second), "--out", str(tmp_path / "out"),
                            "--not-run", "07_input_pipeline=GPU time ran out",
                            "--measurement", str(m), "--note", "two checks",
                            "--readme", str(readme)]) == 0
    text = (tmp_path / "out" / "2026-11-26-gpu-node-7.md").read_text()
    assert "| notebook `07_input_pipeline` | not run: GPU time ran out |" in text
    assert "- two checks" in text and "| 8192^3 | 8192 x 8192 x 8192 | 732.7 | 100.00% | 92.75% |" in text
    assert "2 pass, 0 fail, 1 not run" in readme.read_text()


MATMUL = {"bench": "matmul_roof", "device": "NVIDIA H100 80GB HBM3", "peak_reference": 790.0,
          "roof_tflops": 732.7, "rows": [{"shape": "8192^3", "M": 8192, "K": 8192, "N": 8192,
                                          "tflops": 732.7, "of_roof": 1.0,
                                          "of_peak_reference": 0.9275}]}


def test_measurements_print_the_files_numbers():
    import gpu_measurements as gm
    tta = [{"bench": "time_to_accuracy", "device": d, "hardware": h, "width": 16, "batch_size": 128,
            "precision": p, "reached": True, "seconds_to_target": s, "steps_to_target": 1170,
            "eval_seconds": 2.5, "threads": 4, "final_acc": 0.901}
           for d, h, p, s in (("NVIDIA H100 80GB HBM3", "GPU/nccl", "bf16", 19.98),
                              ("CPU", "CPU/gloo", "fp32", 999.0))]
    text = gm.render_measurements(tta + [MATMUL])
    assert "| NVIDIA H100 80GB HBM3 | 16 | 128 | bf16 | 19.98 | 1170 | 2.5 | 4 |" in text
    assert "the GPU reached 90 % in 19.98 s, the CPU in 999.0 s: 50 x" in text
    assert "roof is this GPU's own 8192^3 product in this run (732.7 TFLOP/s)" in text


def test_a_check_on_another_gpu_is_named_in_its_rows_facts_and_readme(tmp_path):
    # the H100 checks' record, then an H200 check that built Horovod (issue #24's third check)
    first = _record(tmp_path, "a", [Result("03_horovod_synthetic_resnet50", "notebook",
                                           "not run: horovod missing"),
                                    Result("02_ddp/train.py", "lab", "pass", 0.2, {}, "local")])
    data = json.loads(first.read_text())
    data["facts"]["horovod"] = None
    data["measurements"] = [MATMUL]
    first.write_text(json.dumps(data))
    info = {**INFO, "date": "2026-11-26T22:11+00:00", "gpus": 1, "gpu_names": ["NVIDIA H200"],
            "horovod": "0.28.1+torch2.11.0.cu130.nccl"}
    _, second = gpu_record.write_record(info, [Result("03_horovod_synthetic_resnet50", "notebook",
                                                      "pass", 1.0, {}, "fast mode")], tmp_path / "b")
    merged, rows = gpu_record.merge([first, second])
    assert [m["gpus"] for m in merged["machines"]] == ["2 x NVIDIA H100 80GB HBM3", "1 x NVIDIA H200"]
    assert merged["horovod"] == "0.28.1+torch2.11.0.cu130.nccl (on 1 x NVIDIA H200)"
    assert rows[0].detail == ("after not run: horovod missing in an earlier check: "
                              "on 1 x NVIDIA H200, 2026-11-26T22:11: fast mode")
    assert rows[1].detail == "local"                                  # the first machine's row
    readme = tmp_path / "README.md"
    readme.write_text(f"x\n{gpu_record.README_MARK} none yet\n")
    assert gpu_record.main(["merge", str(first), str(second), "--out", str(tmp_path / "out"),
                            "--readme", str(readme)]) == 0
    text = (tmp_path / "out" / "2026-11-26-gpu-node-7.md").read_text()
    assert ("| GPUs | 2 x NVIDIA H100 80GB HBM3 (first check 2026-11-26T13:10+00:00); "
            "1 x NVIDIA H200 (first check 2026-11-26T22:11+00:00)") in text
    assert "| 8192^3 | 8192 x 8192 x 8192 | 732.7 |" in text          # the first's measurements kept
    assert "2 x NVIDIA H100 80GB HBM3 and 1 x NVIDIA H200](out/2026-11-26-gpu-node-7.md): 2 pass" \
        in readme.read_text()


def test_the_horovod_ratio_shows_every_run_beside_the_medians():
    import gpu_measurements
    m = {"bench": "hvd_upstream", "device": "NVIDIA H200", "args": ["--model", "resnet50"],
         "runs": {"lab": [{"img_per_s": 1650.6}, {"img_per_s": 1576.9}],
                  "upstream": [{"img_per_s": 1381.0}, {"img_per_s": 1360.4}]},
         "lab_img_per_s": 1613.75, "upstream_img_per_s": 1370.7, "ratio": 1.1773, "goal": 0.95,
         "seed_v100_img_per_s": 336.0}
    text = "\n".join(gpu_measurements.hvd_upstream(m))
    assert "lab 03 1613.8 img/s, Horovod's example 1370.7 img/s (medians), ratio 1.1773" in text
    assert "lab 03 1650.6, 1576.9; the example 1381.0, 1360.4 img/s" in text
    assert "Reference, not measured here: seed 001, 1 x V100" in text
