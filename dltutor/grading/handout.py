"""Hand the course out: the nbgitpuller link that puts it into each student's home on a hub.

    from dltutor.grading.handout import gitpuller_link
    gitpuller_link("https://hub.example.edu", "https://git.example.edu/course/dltutor.git",
                   branch="main")
    # https://hub.example.edu/hub/user-redirect/git-pull?repo=...&branch=main&targetpath=dltutor
    #   &urlpath=lab/tree/dltutor/course/notebooks/01_single_gpu_cifar10.ipynb

A student who opens the link logs in (if they are not), gets their server started, and
nbgitpuller (a server extension installed beside the hub's JupyterLab) clones the repository into
their home as `<targetpath>/` (the repository's name unless given) or, when it is already there,
merges the instructor's new commits without overwriting the student's edits; then JupyterLab opens
`notebook` in the copy. The same link hands out later updates.

`repo` is anything `git clone` takes on the server's machine: an https URL, or a path / file://
URL of a repository on a shared file system (what the tests use). The pulled notebooks run the
library of the course environment (the `dltutor` kernel) and the labs of the pulled copy
(`dltutor.core.course`: the copy a notebook was opened from), and each launch says which copy.
"""
from __future__ import annotations

from urllib.parse import urlencode

FIRST_NOTEBOOK = "course/notebooks/01_single_gpu_cifar10.ipynb"


def target_of(repo: str) -> str:
    """The folder nbgitpuller clones `repo` into by default (the last part of its path/URL)."""
    name = str(repo).rstrip("/").split("/")[-1]
    return name[:-4] if name.endswith(".git") else name


def gitpuller_link(hub_url: str, repo: str, branch: str = "main",
                   notebook: str = FIRST_NOTEBOOK, targetpath: str | None = None) -> str:
    """The link to give students: clone/update `repo` at `branch` into their home and open
    `notebook` (a path inside the repository) in JupyterLab. `hub_url` is the hub's address
    (without /hub/); the link goes through /hub/user-redirect/, so it is the same for everyone."""
    if not repo or not branch:
        raise ValueError("gitpuller_link needs the course repository and its branch")
    target = targetpath or target_of(repo)
    query = urlencode({"repo": str(repo), "branch": branch, "targetpath": target,
                       "urlpath": f"lab/tree/{target}/{notebook.lstrip('/')}"})
    return f"{hub_url.rstrip('/')}/hub/user-redirect/git-pull?{query}"
