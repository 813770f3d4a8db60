"""The argument layer of every lab and of `python -m dltutor`: checked types and `--tiny`.

    p = flags.parser(__doc__)                       # --help shows the docstring and each default
    p.add_argument("--epochs", type=flags.positive_int, default=30, help="passes over the data")
    flags.add_tiny(p, {"epochs": 2, "batch_size": 64})
    args = flags.parse(p, argv)                     # --tiny fills only flags you did not give

Each type refuses bad input through argparse: the usage line, one sentence naming the flag and
the fix, exit code 2 — never a traceback and never a run that goes on with nonsense.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from dltutor.core.units import parse_bytes

ArgumentTypeError = argparse.ArgumentTypeError


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults shown after each flag; the description (a lab's docstring) kept as written."""


def parser(description: str, **kwargs) -> argparse.ArgumentParser:
    """An ArgumentParser whose --help prints `description` as written and every default."""
    return argparse.ArgumentParser(description=description, formatter_class=HelpFormatter, **kwargs)


# ---------------------------------------------------------------- checked types
def _number(kind, text, test, wanted: str):
    try:
        value = kind(text)
    except (TypeError, ValueError):
        raise ArgumentTypeError(f"{text!r} is not a number: give {wanted}") from None
    if value != value or not test(value):  # NaN fails too
        raise ArgumentTypeError(f"{text!r} is out of range: give {wanted}")
    return value


def positive_int(text) -> int:
    """A whole number >= 1 (sizes, counts, epochs)."""
    return _number(int, text, lambda v: v >= 1, "a whole number >= 1")


def nonnegative_int(text) -> int:
    """A whole number >= 0 (0 usually means 'off' or 'all'; the flag's help says which)."""
    return _number(int, text, lambda v: v >= 0, "a whole number >= 0")


def positive_float(text) -> float:
    """A finite number > 0 (learning rates, budgets, bucket sizes)."""
    return _number(float, text, lambda v: 0 < v < float("inf"), "a number > 0")


def nonnegative_float(text) -> float:
    """A finite number >= 0."""
    return _number(float, text, lambda v: 0 <= v < float("inf"), "a number >= 0")


def fraction(text) -> float:
    """A number in (0, 1]."""
    return _number(float, text, lambda v: 0 < v <= 1, "a number in (0, 1]")


def byte_size(text) -> int:
    """A size > 0 with an optional unit: 4096, 64KiB, 1MiB, 2GiB."""
    try:
        value = parse_bytes(text)
    except ValueError as exc:
        raise ArgumentTypeError(str(exc)) from None
    if value <= 0:
        raise ArgumentTypeError(f"size {text!r} must be > 0, e.g. 1KiB")
    return value


def byte_sizes(text) -> list[int]:
    """A comma-separated list of sizes: '1KiB,64KiB,1MiB'."""
    parts = [p for p in str(text).split(",") if p.strip()]
    if not parts:
        raise ArgumentTypeError("give at least one size, e.g. 1KiB,1MiB")
    return [byte_size(p) for p in parts]


def choice_list(allowed):
    """A type for a comma-separated subset of `allowed`."""
    allowed = tuple(allowed)

    def parse(text) -> list[str]:
        items = [s.strip() for s in str(text).split(",") if s.strip()]
        bad = [s for s in items if s not in allowed]
        if bad or not items:
            raise ArgumentTypeError(f"unknown {bad or text!r}: choose from {','.join(allowed)}")
        return items
    parse.__name__ = "comma-separated list"
    return parse


def _existing(text, test, what: str) -> str:
    path = Path(text).expanduser()
    if not test(path):
        raise ArgumentTypeError(f"no such {what}: {text} (check the path; relative paths start "
                                f"in {Path.cwd()})")
    return str(path)


def existing_file(text) -> str:
    """A path to a file that exists."""
    return _existing(text, Path.is_file, "file")


def existing_path(text) -> str:
    """A path to a file or folder that exists."""
    return _existing(text, Path.exists, "file or folder")


def existing_dir(text) -> str:
    """A path to a folder that exists."""
    return _existing(text, Path.is_dir, "folder")


def deepspeed_config(text) -> str:
    """A DeepSpeed JSON config that exists, parses and names a ZeRO stage DeepSpeed has (0-3)."""
    path = existing_file(text)
    try:
        cfg = json.loads(Path(path).read_text())
    except json.JSONDecodeError as exc:
        raise ArgumentTypeError(f"{text} is not valid JSON (line {exc.lineno}: {exc.msg}); "
                                "start from one of course/labs/04_deepspeed/configs/") from None
    if not isinstance(cfg, dict):
        raise ArgumentTypeError(f"{text} must hold a JSON object (a DeepSpeed config)")
    stage = (cfg.get("zero_optimization") or {}).get("stage", 0)
    if stage not in (0, 1, 2, 3):
        raise ArgumentTypeError(f"{text}: zero_optimization.stage is {stage!r}; DeepSpeed has "
                                "stages 0, 1, 2 and 3")
    return path


# ---------------------------------------------------------------- --tiny
def add_tiny(p: argparse.ArgumentParser, preset: dict, what: str = "CI preset") -> None:
    """Add --tiny: `preset` ({dest: value}) fills every flag the command line did not give."""
    p.tiny_preset = dict(preset)
    p.add_argument("--tiny", action="store_true", help=f"{what}: " + ", ".join(
        f"{k.replace('_', '-')}={v}" for k, v in preset.items()) + " (flags you give win)")


def given(p: argparse.ArgumentParser, argv) -> set[str]:
    """The dests the command line `argv` set explicitly (whatever spelling or form it used)."""
    saved = {a: a.default for a in p._actions}
    saved_defaults = dict(p._defaults)
    try:
        for action in p._actions:
            action.default = argparse.SUPPRESS
        p._defaults.clear()
        ns, _ = p.parse_known_args(argv)
    finally:
        for action, default in saved.items():
            action.default = default
        p._defaults.update(saved_defaults)
    return set(vars(ns))


def parse(p: argparse.ArgumentParser, argv=None) -> argparse.Namespace:
    """`p.parse_args(argv)`, then --tiny's preset over every flag not given explicitly."""
    import sys
    argv = sys.argv[1:] if argv is None else list(argv)
    ns = p.parse_args(argv)
    preset = getattr(p, "tiny_preset", None)
    if preset and getattr(ns, "tiny", False):
        explicit = given(p, argv)
        for dest, value in preset.items():
            if dest not in explicit:
                setattr(ns, dest, value)
    return ns
