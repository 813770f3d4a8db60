"""launch: start a lab on N ranks from a notebook or a shell, stream it, always clean up.

  run.py       `launch(script, nproc, ...)`: the one entry point (local, torchrun, horovod, slurm)
  warm.py      the warm start ('local'): ranks forked from a server that imported torch once;
               warm_server.py (that server), warm_rank.py (inside a forked rank), warm_client.py
               (the launcher process each launch starts: standard library only)
  backends.py  how each launcher is started and how its output names ranks (python, torchrun, horovodrun)
  results.py   LaunchResult, LaunchError and the rule that blames the rank that failed first
  restart.py   launch(..., max_restarts=N): a rank dies -> all stop, the launch starts again
               (attempt logs kept, DLTUTOR_RESTART_COUNT for the ranks, each restart's blame)
  waiting.py   what a launch says while its ranks are silent (which rank, its last line, until when)
  processes.py the variables that make a rank, launch tags that find every process, free ports
  reaper.py    ends every process of a launch when the kernel that started it dies
  slurm.py     srun steps and batch jobs (submit, poll, stream, cancel); `python -m dltutor.launch.slurm`
  srun_lines.py  srun's labelled output: the task of a line, over-long lines (cut by srun) made whole
  job_faults.py  why a Slurm job failed (the task, or the node Slurm lost, and its ranks) or never starts
  hostfile.py  a DeepSpeed hostfile / horovodrun -H list checked against the job's nodes and tasks
  nodes.py     the nodes a launch can use: this kernel's Slurm job, the cluster's nodes in service
  sites.py     site profiles (queues and limits, GPUs per node, modules, environment, account) and
               job scripts from templates; site_lines.py builds their set-up and launch lines
  gpu_bind.py  starts a rank with only the GPU its site's order gives its local rank
Used by notebooks 02-07 (and their labs when run from a kernel); imports only dltutor.core.
"""
