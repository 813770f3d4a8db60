"""Run the student's exercise script on real ranks and collect what the ranks reported.

    ran = run_on_ranks(script, nproc=2)      # the course launcher (dltutor.launch.run.launch)
    ran.metrics                              # every DLTUTOR_METRICS record of every rank
    ran.failure                              # None, or the launcher's message (failing rank named)
    ran.unstarted                            # a rank stopped at a TODO (NotImplementedError)

The ranks run on the CPU with gloo (CUDA_VISIBLE_DEVICES="") and a bounded process-group timeout
(DLTUTOR_DIST_TIMEOUT), so a script that hangs in a collective fails within `timeout` seconds with
the stuck rank named, and nothing is left running (the launcher's guarantee).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

UNSTARTED = "NotImplementedError"      # what a skeleton's TODOs raise


@dataclass
class Ran:
    metrics: list = field(default_factory=list)
    failure: str | None = None
    logs: dict = field(default_factory=dict)

    @property
    def unstarted(self) -> bool:
        text = (self.failure or "") + "".join(_tail(p) for p in self.logs.values())
        return self.failure is not None and UNSTARTED in text

    def of(self, event: str) -> list[dict]:
        """The records with this `event`, in rank order."""
        return sorted((m for m in self.metrics if m.get("event") == event),
                      key=lambda m: m.get("rank", 0))


def _tail(path, n: int = 4000) -> str:
    try:
        return Path(path).read_text(errors="replace")[-n:]
    except OSError:
        return ""


def work_file(name: str) -> Path:
    """Where the notebook writes the student's script (`%%writefile {path}`): a user folder."""
    from dltutor.core.env import cache_dir
    folder = cache_dir() / "exercises"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / name


def missing(script) -> str | None:
    """The "not yet" message when the student's file is not there."""
    if script is None or not Path(script).is_file():
        return f"there is no script at {script}: run the %%writefile cell above first"
    return None


def run_on_ranks(script, nproc: int = 2, *, args=(), env=None, timeout: float = 180.0,
                 dist_timeout: int = 30, echo: bool = False, oversubscribe: bool = True) -> Ran:
    """Launch `script` on `nproc` CPU ranks; never raises for a failing or hanging script."""
    from dltutor.launch.results import LaunchError
    from dltutor.launch.run import launch
    ranks_env = {"CUDA_VISIBLE_DEVICES": "", "DLTUTOR_DIST_TIMEOUT": str(dist_timeout),
                 **(env or {})}
    try:
        result = launch(script, nproc=nproc, args=list(args), env=ranks_env, threads=1,
                        timeout=timeout, echo=echo, oversubscribe=oversubscribe)
    except LaunchError as exc:
        res = exc.result
        return Ran(metrics=res.metrics if res is not None else [], failure=str(exc),
                   logs=res.logs if res is not None else {})
    return Ran(metrics=result.metrics, logs=result.logs)
