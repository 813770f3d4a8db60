"""Bad input, tried on every flag of every lab and of `python -m dltutor`: one clear error, exit 2.

Each lab is run in-process up to its argument parsing (every lab and the CLI parse through
`dltutor.core.flags.parse`, which the test wraps: it stops the lab right after parsing, so no
training starts). The cases are made from the parsers themselves, so a new flag is tried without
writing a test:

  * every numeric flag: 0, -1 and a non-number. -1 and the non-number must be refused; 0 must be
    refused unless the flag's type says 0 is meaningful (nonnegative_int / nonnegative_float);
    a numeric flag without one of the course's checked types fails the test (only `--seed` may
    take any integer);
  * every byte-size flag: an unknown unit, 0 and -1; every comma-list flag: an unknown entry;
  * every input-path flag: a path that does not exist;
  * every DeepSpeed-config flag: ZeRO stage 7 and malformed JSON.
Refused means: SystemExit(2), argparse's usage line, `argument --flag` and no traceback.
"""
from __future__ import annotations

import contextlib
import importlib.util
import io
import runpy
import shlex
import sys
from pathlib import Path

import pytest

from dltutor import cli
from dltutor.core import flags

ROOT = Path(__file__).resolve().parents[1]
LABS = ROOT / "course" / "labs"
ZERO0 = str(LABS / "04_deepspeed" / "configs" / "zero0.json")
NUMERIC = {flags.positive_int, flags.nonnegative_int, flags.positive_float,
           flags.nonnegative_float, flags.fraction}
ZERO_OK = {flags.nonnegative_int, flags.nonnegative_float}
PATHS = {flags.existing_file, flags.existing_dir, flags.existing_path}
ANY_INTEGER = {"seed", "local_rank"}   # seeds may be any integer; --local_rank is DeepSpeed's


class Parsed(Exception):
    """Raised by the wrapped `flags.parse` once the arguments were accepted."""


def _module(relative):
    spec = importlib.util.spec_from_file_location(f"lab_{Path(relative).stem}", LABS / relative)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _script(relative):
    def run(argv):
        old = sys.argv
        sys.argv = [str(LABS / relative), *argv]
        try:
            runpy.run_path(str(LABS / relative), run_name="__main__")
        finally:
            sys.argv = old
    return run


# name -> (entry point taking argv, argv every case starts from)
ENTRIES = {
    "lab 01 train.py": (lambda a: _module("01_cifar10/train.py").main(a), []),
    "lab 02 train.py": (lambda a: _module("02_ddp/train.py").main(a), []),
    "lab 03 pytorch_synthetic_benchmark.py": (_script("03_horovod/pytorch_synthetic_benchmark.py"), []),
    "lab 03 ddp_synthetic_benchmark.py": (_script("03_horovod/ddp_synthetic_benchmark.py"), []),
    "lab 04 train_bert.py": (lambda a: _module("04_deepspeed/train_bert.py").main(a), []),
    "lab 04 train_bert_ds.py": (lambda a: _module("04_deepspeed/train_bert_ds.py").main(a),
                                ["--deepspeed_config", ZERO0]),
    "lab 04 sweep_zero.py": (lambda a: _module("04_deepspeed/sweep_zero.py").main(a), []),
    "lab 05 allreduce_bench.py": (lambda a: _module("05_allreduce/allreduce_bench.py").main(a), []),
    "lab 04 train_bert_fsdp.py": (lambda a: _module("04_deepspeed/train_bert_fsdp.py").main(a), []),
    "lab 06 tp_mlp.py": (lambda a: _module("06_model_parallel/tp_mlp.py").main(a), []),
    "lab 06 pipeline.py": (lambda a: _module("06_model_parallel/pipeline.py").main(a), []),
    "lab 07 io_bench.py": (lambda a: _module("07_io/io_bench.py").main(a), []),
    "python -m dltutor preflight": (lambda a: cli.main(["preflight", *a]), []),
    "python -m dltutor data stage": (lambda a: cli.main(["data", "stage", *a]), ["--from", str(ROOT)]),
    "python -m dltutor kernel install": (lambda a: cli.main(["kernel", "install", *a]), []),
    "python -m dltutor doctor": (lambda a: cli.main(["doctor", *a]), []),
}


def attempt(monkeypatch, name, argv):
    """('parsed', '') or ('exit <code>', stderr) for `argv` on entry `name`."""
    entry, base = ENTRIES[name]
    real = flags.parse

    def parse_then_stop(p, args=None):
        real(p, args)
        raise Parsed(p)
    monkeypatch.setattr(flags, "parse", parse_then_stop)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            entry([*base, *argv])
    except Parsed:
        return "parsed", err.getvalue()
    except SystemExit as exc:
        return f"exit {exc.code}", err.getvalue()
    finally:
        monkeypatch.setattr(flags, "parse", real)
    return "ran", err.getvalue()


def parser_of(monkeypatch, name):
    entry, base = ENTRIES[name]

    def capture(p, args=None):
        raise Parsed(p)
    monkeypatch.setattr(flags, "parse", capture)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            entry(list(base))
    except Parsed as exc:
        parser = exc.args[0]
    finally:
        monkeypatch.undo()
    sub = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
    return sub[0].choices[name.split()[3]] if sub else parser


def cases(parser) -> list[tuple[str, list, bool, str]]:
    """(flag, argv, refused?, why) for every flag of `parser`."""
    out = []
    for act in parser._actions:
        if not act.option_strings or act.nargs == 0 or act.dest == "help":
            continue
        flag, t = act.option_strings[-1], act.type
        if t in NUMERIC or t in (int, float) or isinstance(act.default, (int, float)) \
                and not isinstance(act.default, bool) and t is None:
            if t not in NUMERIC and act.dest not in ANY_INTEGER:
                out.append((flag, None, True, "a numeric flag without a checked type"))
                continue
            out.append((flag, [flag, "abc"], True, "not a number"))
            if act.dest not in ANY_INTEGER:
                out.append((flag, [flag, "-1"], True, "negative"))
                out.append((flag, [flag, "0"], t not in ZERO_OK, "zero"))
        elif t in (flags.byte_size, flags.byte_sizes):
            out += [(flag, [flag, v], True, why) for v, why in
                    (("1XB", "unknown unit"), ("0", "zero size"), ("-1", "negative size"))]
        elif getattr(t, "__name__", "") == "comma-separated list":
            out.append((flag, [flag, "nope"], True, "unknown entry"))
        elif t in PATHS:
            out.append((flag, [flag, "/nonexistent/dltutor-input"], True, "missing path"))
        elif t is flags.deepspeed_config:
            out.append((flag, [flag, "/nonexistent/ds.json"], True, "missing config"))
            out.append((flag, [flag, "STAGE7"], True, "ZeRO stage 7"))
            out.append((flag, [flag, "MALFORMED"], True, "malformed JSON"))
    return out


ALL = []   # filled by test_every_flag_of_every_entry, read by the count test


@pytest.mark.parametrize("name", sorted(ENTRIES))
def test_every_flag_of_every_entry(name, monkeypatch, tmp_path):
    (tmp_path / "stage7.json").write_text('{"zero_optimization": {"stage": 7}}')
    (tmp_path / "bad.json").write_text('{"zero_optimization": {"stage": 3,}}')
    found = cases(parser_of(monkeypatch, name))
    wrong = []
    for flag, argv, refuse, why in found:
        if argv is None:
            wrong.append(f"{flag}: {why}: use a type from dltutor.core.flags")
            continue
        argv = [{"STAGE7": str(tmp_path / "stage7.json"),
                 "MALFORMED": str(tmp_path / "bad.json")}.get(a, a) for a in argv]
        outcome, err = attempt(monkeypatch, name, argv)
        ALL.append((name, flag, why))
        if refuse and not (outcome == "exit 2" and "usage:" in err and f"argument {flag}" in err
                           and "Traceback" not in err):
            wrong.append(f"{shlex.join(argv)} ({why}): {outcome}; stderr: {err.strip()[-300:]!r}")
        elif not refuse and outcome != "parsed":
            wrong.append(f"{shlex.join(argv)} ({why}) should be accepted: {outcome} {err[-300:]!r}")
    assert not wrong, f"{name}:\n" + "\n".join(wrong)
    assert found or name.startswith("python -m dltutor"), f"{name}: no flags found"


def test_a_good_command_line_is_accepted(monkeypatch):
    for name in ENTRIES:
        outcome, err = attempt(monkeypatch, name, [])
        assert outcome == "parsed", f"{name}: {outcome}: {err[-500:]}"


def test_cli_data_stage_without_from_and_with_a_folder_without_cifar(monkeypatch, tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["data", "stage"])
    assert exc.value.code == 2 and "needs --from DIR" in capsys.readouterr().err
    assert cli.main(["data", "stage", "--from", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "no CIFAR-10 in" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
