"""A TACC-like portal for tests/test_hub.py: JupyterHub whose single-user servers are Slurm jobs.

Everything machine-specific comes from the environment the test sets (HUB_*), so the file holds no
paths or ports; the node names of the cluster resolve through its hosts file (HUB_SLURM_HOSTS). The user logs in with a password (DummyAuthenticator: the test's stand-in for the
centre's login); the hub submits the user's JupyterLab with sbatch (batchspawner's SlurmSpawner) and
the server runs from the hub's own Python, not from the course environment.

A class (tests/test_hub_class.py): HUB_USERS lists several students, each a real Unix account whose
home is HUB_HOMES/<name>; with HUB_AS_USERS=1 the hub (root) submits each server as its student
(`setpriv` in place of a portal's `sudo -E -u`), so the Jupyter job, its kernels and every rank run
as that student, with their own HOME. HUB_EXPOSE_APP=1 lets a test's browser drive JupyterLab.
"""
import os

c = get_config()  # noqa: F821 (JupyterHub provides it)
e = os.environ
state = e["HUB_STATE"]

c.JupyterHub.ip = c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.port = int(e["HUB_PORT"])
c.JupyterHub.hub_port = int(e["HUB_API_PORT"])
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{e['HUB_PROXY_API_PORT']}"
c.ConfigurableHTTPProxy.command = [e["HUB_PROXY"]]
c.ConfigurableHTTPProxy.pid_file = f"{state}/proxy.pid"
c.JupyterHub.db_url = f"sqlite:///{state}/hub.sqlite"
c.JupyterHub.cookie_secret_file = f"{state}/cookie_secret"
c.JupyterHub.pid_file = f"{state}/hub.pid"

c.JupyterHub.authenticator_class = "dummy"
c.DummyAuthenticator.password = e["HUB_PASSWORD"]
c.Authenticator.allowed_users = set((e.get("HUB_USERS") or e["HUB_USER"]).split(","))
c.JupyterHub.services = [{"name": "tester", "api_token": e["HUB_SERVICE_TOKEN"]}]
c.JupyterHub.load_roles = [{"name": "tester", "services": ["tester"],
                            "scopes": ["admin:users", "admin:servers", "tokens", "read:servers"]}]

c.JupyterHub.spawner_class = "batchspawner.SlurmSpawner"
# squeue tells the hub the node its server runs on (node1, node2), a name the hub's machine does not
# resolve by itself: the portal's DNS is the cluster's hosts file (HUB_SLURM_HOSTS, "address name..."
# lines), read when the hub starts. MultiSlurmSpawner is SlurmSpawner plus that name -> address map.
if e.get("HUB_SLURM_HOSTS"):
    with open(e["HUB_SLURM_HOSTS"]) as hosts_file:
        rows = [line.split("#")[0].split() for line in hosts_file]
    c.JupyterHub.spawner_class = "batchspawner.MultiSlurmSpawner"
    c.MultiSlurmSpawner.daemon_resolver = {name: row[0] for row in rows if len(row) > 1
                                           for name in row[1:]}
homes = e.get("HUB_HOMES")   # a class: each student's home is HUB_HOMES/<name>
if e.get("HUB_AS_USERS") == "1":   # the hub runs as root; each job is its student's
    c.SlurmSpawner.exec_prefix = "setpriv --reuid={username} --regid={username} --init-groups"
else:
    c.SlurmSpawner.exec_prefix = ""   # the test user is the user running the tests: no sudo
job_dir = (homes + "/{{username}}") if homes else state   # the job's log: where its user may write
c.SlurmSpawner.batch_script = """#!/bin/bash
#SBATCH --job-name=jupyterhub-{{username}}
#SBATCH --output=""" + job_dir + """/jupyter-job-%j.log
#SBATCH --chdir=""" + job_dir + """
#SBATCH --export={{keepvars}}
#SBATCH --ntasks=1
#SBATCH --cpus-per-task={{nprocs}}
{{cmd}}
"""
c.SlurmSpawner.req_nprocs = e.get("HUB_JOB_CPUS", "2")
c.Spawner.cmd = [e["HUB_SINGLEUSER"]]
c.Spawner.args = ["--allow-root"] if os.getuid() == 0 and not homes else []
if e.get("HUB_EXPOSE_APP") == "1":
    c.Spawner.args += ["--LabApp.expose_app_in_browser=True"]
# the student's home: nbgitpuller's links clone into it
c.Spawner.notebook_dir = (homes + "/{username}") if homes else e["HUB_NOTEBOOK_DIR"]
c.Spawner.default_url = "/lab"
c.Spawner.start_timeout = c.Spawner.http_timeout = int(e.get("HUB_START_TIMEOUT", "180"))
# What the portal's job sees: its Slurm, the user's Jupyter data dir (where `python -m dltutor kernel
# install` put the course kernel), and the course's test settings.
c.Spawner.environment = {k: e[k] for k in ("SLURM_CONF", "JUPYTER_DATA_DIR", "DLTUTOR_FAST",
                                           "DLTUTOR_OFFLINE", "DLTUTOR_DATA", "HOME") if k in e}
if homes:   # a class: each student's own home, their Jupyter files and course state in it
    c.Spawner.environment.pop("JUPYTER_DATA_DIR", None)
    c.Spawner.environment.update(HOME=lambda spawner: f"{homes}/{spawner.user.name}",
                                 USER=lambda spawner: spawner.user.name)
# batchspawner wraps the command in its `batchspawner-singleuser`, found on the job's PATH.
c.Spawner.environment["PATH"] = os.path.dirname(e["HUB_SINGLEUSER"]) + os.pathsep + e["PATH"]
