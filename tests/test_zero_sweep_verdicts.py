"""Notebook 04 after the second expert read (issue #42): memory between a sweep's configs, the
labels of the plots and tables, and where the NVMe swap files really went."""
from dltutor.zero import bert_lab, budget, plots, runs


def _vmhwm_mib():
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) // 1024 for line in fh if line.startswith("VmHWM:"))


def test_each_config_gets_its_own_rss_peak_on_a_cpu():
    big = bytearray(300 * 2**20)          # touched: 300 MiB resident, then freed
    del big
    before = _vmhwm_mib()
    assert budget.reset_peak("cpu") == 0
    assert _vmhwm_mib() < before - 200     # the high-water mark restarted from now


def test_release_engine_drops_the_stage3_module_deepspeed_never_pops():
    from deepspeed.runtime.zero import parameter_offload
    destroyed = []

    class Engine:
        module = object()

        def destroy(self):
            destroyed.append(True)

    engine, other = Engine(), object()
    parameter_offload.FWD_MODULE_STACK.extend([other, engine.module])
    try:
        bert_lab.release_engine(engine)
        assert destroyed and engine.module not in parameter_offload.FWD_MODULE_STACK
        assert other in parameter_offload.FWD_MODULE_STACK
    finally:
        parameter_offload.FWD_MODULE_STACK[:] = [m for m in parameter_offload.FWD_MODULE_STACK
                                                 if m is not other]


def test_bar_labels_say_which_ratio_they_are():
    assert plots.ratio_label(dict(ratio=0.24, offload="nvme")) == "in RAM: 0.24\nof formula"
    assert plots.ratio_label(dict(ratio=1.03, offload="none")) == "measured /\nformula 1.03"


def test_speed_table_prints_the_verdicts_interval():
    rows = runs.speed_table([dict(label="a", speed_ci95=(0.6017, 0.8664)), dict(label="b")])
    assert [r["speed_ci95"] for r in rows] == ["0.602-0.866", ""]


def test_swap_medium_names_the_file_system_and_the_page_cache(tmp_path):
    line = runs.swap_medium(tmp_path)
    assert line.startswith("swap folder on ") and "page cache" in line and "?" not in line


def test_deepspeed_rate_is_set_beside_the_labs_with_units():
    note = runs.deepspeed_log_note([dict(RunningAvgSamplesPerSec=0.83),
                                    dict(RunningAvgSamplesPerSec=0.95)], dict(samples_per_s_lab=0.66))
    assert "GiB of process RSS" in note and "0.83-0.95 vs the lab's 0.66 samples/s" in note
