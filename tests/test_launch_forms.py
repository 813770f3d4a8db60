"""Every documented launch form runs: the labs' "Launch forms" blocks and the README's commands.

The forms are read from the text itself, so a form added to a docstring or to the README is
tested without writing a test. Each form is classified:

  * runs here  -> run for real at its smallest size (`--tiny` added where the lab has it and the
                  form lacks it), in a copy of the course, and must exit 0 and report;
  * needs more -> GPUs, several nodes, more ranks than this machine has cores, MPI, conda, a
                  placeholder path, or `[full size]`: listed with the reason, and checked to be
                  well-formed: a known launcher, a script that exists, and only flags the lab's
                  own --help knows.
`srun`/`sbatch` forms run in the tests' one-node Slurm.
"""
from __future__ import annotations

import ast
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import pytest

from dltutor.core.env import cpu_cores

ROOT = Path(__file__).resolve().parents[1]
LABS = ROOT / "course" / "labs"
LAUNCHERS = {"python", "torchrun", "horovodrun", "deepspeed", "srun", "sbatch", "mpirun",
             "mpiexec", "make", "conda", "export", "bash", "source", "cd", "nbgrader"}
RANK_FLAGS = ("--nproc-per-node", "-np", "--ntasks", "-n", "--num_gpus")


@dataclass
class Form:
    where: str                 # file:line
    cwd: Path                  # where it is meant to be typed (relative to the repo root)
    argv: list
    comment: str = ""
    env: dict = field(default_factory=dict)

    def __str__(self):
        return f"{self.where}: {shlex.join(self.argv)}"


def _logical_lines(lines):
    """Lines with `\\` continuations joined, each with its number."""
    out, buf, start = [], "", None
    for no, line in lines:
        start = no if not buf else start
        if line.rstrip().endswith("\\"):
            buf += line.rstrip()[:-1] + " "
            continue
        out.append((start, buf + line))
        buf = ""
    return out


def _split_comment(text):
    """(command, comment): the comment starts at the first unquoted ` #`."""
    quote = None
    for i, ch in enumerate(text):
        if ch in "'\"" and quote in (None, ch):
            quote = None if quote else ch
        elif ch == "#" and quote is None and (i == 0 or text[i - 1].isspace()):
            return text[:i], text[i + 1:].strip()
    return text, ""


def _form(where, cwd, text):
    command, comment = _split_comment(text)
    words = shlex.split(command)
    env = {}
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):
        key, _, value = words.pop(0).partition("=")
        env[key] = value
    return Form(where, cwd, words, comment, env) if words else None


def lab_forms() -> list[Form]:
    forms = []
    for path in sorted(LABS.glob("*/*.py")):
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        lines = doc.splitlines()
        heads = [i for i, line in enumerate(lines) if line.startswith("Launch forms")]
        assert heads, f"{path.relative_to(ROOT)}: no 'Launch forms' block in the docstring"
        block = []
        for i in range(heads[0] + 1, len(lines)):
            if not lines[i].startswith((" ", "\t")) or not lines[i].strip():
                break
            block.append((i + 1, lines[i]))
        for no, text in _logical_lines(block):
            form = _form(f"{path.relative_to(ROOT)}:doc{no}", path.parent, text.strip())
            if form:
                forms.append(form)
    return forms


def readme_forms() -> list[Form]:
    text = (ROOT / "README.md").read_text().splitlines()
    forms, inside, block = [], False, []
    for no, line in enumerate(text, start=1):
        if line.startswith("```"):
            if inside:
                for n, logical in _logical_lines(block):
                    form = _form(f"README.md:{n}", ROOT, logical.strip())
                    if form:
                        forms.append(form)
            inside, block = line.strip() == "```bash", []
            continue
        if inside:
            block.append((no, line))
    return forms


FORMS = lab_forms() + readme_forms()


def _value(argv, *names):
    for i, word in enumerate(argv):
        for name in names:
            if word == name and i + 1 < len(argv):
                return argv[i + 1]
            if word.startswith(name + "="):
                return word.split("=", 1)[1]
    return None


def script_of(form: Form) -> Path | None:
    """The lab script the form starts (first *.py word), resolved against the form's folder."""
    for word in form.argv:
        for part in shlex.split(word) if " " in word else [word]:
            if part.endswith(".py"):
                return (form.cwd / part)
    return None


def needs(form: Form) -> str | None:
    """Why this form cannot run on this machine, or None when it can."""
    argv, prog = form.argv, form.argv[0]
    joined = " ".join(argv)
    if prog not in LAUNCHERS:
        return f"unknown launcher {prog!r}"
    if "[full size]" in form.comment:
        return "full size (marked [full size])"
    if prog in ("make", "conda", "export", "bash", "source", "cd", "nbgrader"):
        return {"make": "the README's own commands: `make test` is CI, `make lab HEADLESS=1` "
                        "has tests/test_headless_lab.py",
                "conda": "conda (the portal route; its file is checked by test_environment)",
                "export": "a shell setting",
                "bash": "a set-up script (`make setup` runs scripts/setup.sh and what it calls)",
                "source": "activates an environment (a shell setting)",
                "cd": "a shell setting",
                "nbgrader": "nbgrader's own steps: tests/test_hub_class.py runs them on a hub, "
                            "with the exchange on this machine"}[prog]
    if prog in ("mpirun", "mpiexec"):
        return "MPI (not installed here)"
    if "$" in joined or "/path/to" in joined or "/scratch" in joined:
        return "a site-specific value (placeholder)"
    if re.search(r"--gpus|--gpus-per-task|--gres", joined):
        return "GPUs"
    nodes = _value(argv, "--nnodes", "-N", "--nodes")
    hosts = _value(argv, "-H")
    if (nodes and nodes.split(":")[-1] != "1") or (hosts and "," in hosts):
        return "several nodes"
    per_node = _value(argv, "--ntasks-per-node")
    ranks = next((int(v) for v in (_value(argv, f) for f in RANK_FLAGS) if v and v.isdigit()), 1)
    if per_node and ranks > int(per_node):
        return "several nodes"
    if ranks > cpu_cores():
        return f"{ranks} ranks: more than the {cpu_cores()} cores here"
    return None


def _shared_folder(tmp_path: Path) -> Path:
    """A folder of this test run that both pytest workers see (`pytest-N/`, above `popen-gwX/`),
    named by the run's id: what one worker stores there, the other reads instead of computing."""
    run_id = os.environ.get("PYTEST_XDIST_TESTRUNUID", f"pid{os.getpid()}")
    base = tmp_path.parents[1] if os.environ.get("PYTEST_XDIST_WORKER") else tmp_path.parent
    return base / f"lab-help-{run_id}"


@lru_cache(maxsize=None)
def lab_help(script: Path, shared: Path | None = None) -> str:
    """`python <lab> --help`: run once per test run (each run imports torch: seconds), kept in
    `shared` (see _shared_folder) for the other worker."""
    from filelock import FileLock
    if shared is not None:
        shared.mkdir(parents=True, exist_ok=True)
        kept = shared / (str(script.relative_to(ROOT)).replace("/", "__") + ".txt")
        with FileLock(str(kept) + ".lock", timeout=300):
            if not kept.exists():
                kept.write_text(lab_help(script))
            return kept.read_text()
    out = subprocess.run([sys.executable, str(script), "--help"], capture_output=True, text=True,
                         timeout=120, cwd=script.parent)
    assert out.returncode == 0, f"{script} --help failed:\n{out.stderr[-2000:]}"
    return out.stdout


def test_help_shared_between_workers_is_the_labs_own(tmp_path):
    script = LABS / "02_ddp" / "train.py"
    shared = _shared_folder(tmp_path)
    assert lab_help(script, shared) == lab_help(script)
    assert "--tiny" in lab_help(script) and "usage:" in lab_help(script)


def test_the_forms_are_found():
    labs = {Path(f.where.split(":")[0]).parent.name for f in FORMS if f.where.startswith("course")}
    assert labs == {p.name for p in LABS.iterdir() if list(p.glob("*.py"))}, labs
    assert any(f.where.startswith("README") and f.argv[0] == "torchrun" for f in FORMS)


@pytest.mark.parametrize("form", [f for f in FORMS if needs(f)], ids=str)
def test_form_that_needs_more_is_well_formed(form, tmp_path):
    reason = needs(form)
    assert not reason.startswith("unknown launcher"), f"{form}: {reason}"
    script = script_of(form)
    if script is None or form.argv[0] in ("make", "conda", "export"):
        return
    assert script.is_file(), f"{form}: no such script {script}"
    text = lab_help(script, _shared_folder(tmp_path))
    options = text.split("\noptions:\n", 1)[-1]   # not the docstring's forms
    known = set(re.findall(r"(--?[A-Za-z][\w-]*)", options))
    after = form.argv[[i for i, w in enumerate(form.argv) if w.endswith(".py")][0] + 1:] \
        if any(w.endswith(".py") for w in form.argv) else []
    unknown = [w.split("=")[0] for w in after if w.startswith("-") and w.split("=")[0] not in known]
    assert not unknown, f"{form}: flags the lab does not have: {unknown}"


@pytest.fixture(scope="module")
def course_copy(tmp_path_factory):
    """A copy of the course, so forms that write (checkpoints, logs) never touch the checkout."""
    dest = tmp_path_factory.mktemp("course") / "course"
    shutil.copytree(ROOT / "course", dest, ignore=shutil.ignore_patterns("runs", "checkpoints"))
    return dest


def _runnable_argv(form: Form, shared: Path | None = None) -> list[str]:
    argv = list(form.argv)
    script = script_of(form)
    if script is not None and "--tiny" in lab_help(script, shared) and "--tiny" not in " ".join(argv):
        if argv[0] == "sbatch":
            i = argv.index("--wrap") + 1
            argv[i] += " --tiny"
        else:
            argv.append("--tiny")
    if argv[0] == "horovodrun":   # horovodrun and torchrun from the course environment
        argv[0] = str(Path(sys.executable).with_name("horovodrun"))
    if argv[0] in ("torchrun", "deepspeed"):
        argv[0] = str(Path(sys.executable).with_name(argv[0]))
    return [sys.executable if w == "python" else w for w in argv]


def _word_key(form: Form, word: str) -> str:
    """A word as the command means it: a file it names becomes that file's path in the repo."""
    if "/" in word or word.endswith((".py", ".json")):
        path = (form.cwd / word).resolve()
        if path.is_file() and path.is_relative_to(ROOT):
            return str(path.relative_to(ROOT))
    return word


def same_command(form: Form) -> tuple:
    """What the form runs, independent of where it is typed and of the order of the script's options.

    Two places that document one command (the README's `torchrun ... course/labs/02_ddp/train.py`
    and the lab's own `torchrun ... train.py`) give the same key, so the command runs once and the
    test names every place. The launcher, its flags and the environment are kept as written;
    `--tiny` is left out, as every run here adds it where the lab has it (`_runnable_argv`).
    """
    argv = [_word_key(form, w) for w in form.argv if w != "--tiny"]   # every run adds --tiny
    at = next((i for i, w in enumerate(argv) if w.endswith(".py")), len(argv) - 1) + 1
    groups, current = [], []
    for word in argv[at:]:
        if word.startswith("-") and current:
            groups.append(tuple(current))
            current = []
        current.append(word)
    groups += [tuple(current)] if current else []
    return tuple(sorted(form.env.items())), tuple(argv[:at]), tuple(sorted(groups))


def runnable_commands() -> list[list[Form]]:
    """The forms that run here, one list per distinct command (every place that documents it)."""
    commands: dict[tuple, list[Form]] = {}
    for form in FORMS:
        if not needs(form):
            commands.setdefault(same_command(form), []).append(form)
    return list(commands.values())


def test_one_command_documented_twice_is_run_once():
    """The README's and the lab's text of one command share a run; different commands never do."""
    lab, readme = (next(f for f in FORMS if f.where.startswith(p) and f.argv[0] == "torchrun"
                        and "02_ddp" in str(script_of(f))) for p in ("course", "README"))
    assert same_command(lab) == same_command(readme)
    other = next(f for f in FORMS if f.where.startswith("course") and f.argv[0] == "torchrun"
                 and "02_ddp" not in str(script_of(f)))
    assert same_command(other) != same_command(lab)
    longer = Form("x", lab.cwd, [*lab.argv, "--epochs", "1"])
    assert same_command(longer) != same_command(lab)
    # the options in another order, a config named from another folder: still one command
    ds = [f for f in FORMS if f.argv[0] == "deepspeed" and not needs(f)]
    assert {f.where.split(":")[0] for f in ds} == {"README.md", str(LABS.relative_to(ROOT) /
                                                   "04_deepspeed" / "train_bert_ds.py")}
    assert len({same_command(f) for f in ds}) == 1, [str(f) for f in ds]
    assert sum(len(forms) for forms in runnable_commands()) == len([f for f in FORMS if not needs(f)])


def _job_end(job_id: str) -> tuple[str, str]:
    """(state, exit code) of a submitted job once it ends; cancelled if it runs past 5 min."""
    from dltutor.launch import slurm
    try:
        return slurm.poll(job_id, timeout=300)
    except TimeoutError:
        slurm.cancel(job_id)
        raise


SLURM_LAUNCHERS = ("srun", "sbatch")   # their forms run on the test cluster: test_launch_forms_slurm.py


def run_form(forms: list[Form], course_copy: Path, tmp_path: Path) -> None:
    """Run one documented command (as `forms[0]` writes it, --tiny added) in a copy of the course;
    it must succeed and, for a lab, report its metrics. Every place in `forms` is named on failure."""
    form = forms[0]
    cwd = course_copy / form.cwd.relative_to(ROOT / "course") if form.cwd != ROOT else course_copy.parent
    argv = _runnable_argv(form, _shared_folder(tmp_path))
    if argv[0] == "sbatch":   # submitted, then polled every 0.5 s (`sbatch --wait` sleeps 2, 8, 32 s)
        argv[1:1] = ["--parsable", f"--output={tmp_path / 'job.out'}", "--time=00:05:00"]
    env = {**os.environ, **form.env, "DLTUTOR_OFFLINE": "1", "JUPYTER_DATA_DIR": str(tmp_path),
           "PATH":
           f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    out = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=420,
                         start_new_session=True)
    job = f"job {out.stdout.strip()}: " + " ".join(_job_end(out.stdout.strip())) \
        if argv[0] == "sbatch" and out.returncode == 0 else ""
    text = out.stdout + out.stderr + ((tmp_path / "job.out").read_text()
                                      if (tmp_path / "job.out").exists() else "")
    places = "\n".join(map(str, forms))
    assert out.returncode == 0, f"{places}\nran: {shlex.join(argv)}\n{text[-4000:]}"
    assert not job or job.endswith("COMPLETED 0:0"), f"{places}\n{job}\n{text[-4000:]}"
    if script_of(form) is not None and form.argv[0] != "make":
        assert ("DLTUTOR_METRICS" in text or "Total img/sec" in text), f"{form}: no report\n{text[-2000:]}"


def commands_of(slurm: bool) -> list[list[Form]]:
    """The runnable commands started by srun/sbatch (slurm=True) or by anything else."""
    return [forms for forms in runnable_commands() if (forms[0].argv[0] in SLURM_LAUNCHERS) == slurm]


@pytest.mark.slow
@pytest.mark.parametrize("forms", commands_of(slurm=False), ids=lambda forms: " = ".join(map(str, forms)))
def test_form_runs_here(forms, course_copy, tmp_path):
    run_form(forms, course_copy, tmp_path)
