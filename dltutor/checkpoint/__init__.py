"""Notebook 10's topic: checkpoints that let a stopped or killed run go on bit for bit.

    state.py    the app state DCP saves and loads: model, optimizer, step, each rank's RNG
                states, the data position (which parts: a parameter)
    store.py    step-N folders: save (sync, or async on a group of its own), the newest complete
                one (has .metadata), load it or start fresh, one clear error for another model
    compare.py  full parameters, their sha256 and largest difference; dcp_to_torch and back
    cost.py     what a save costs (lab save_cost.py): seconds sync (page cache, fsync'd) and async
                (the loop blocked, until done) per model size, bytes on disk beside 12 B/parameter
    cost_report.py  cost's sentences (decided only outside the 95 % intervals) and its bar plot
    restarts.py a rank killed on purpose (after a step, or inside a save before .metadata: a torn
                folder), torchrun's restart count, and torchrun with --max-restarts and
                TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 (why: pytorch issue 135712), the course launcher's
                restart count, seeded random failures (exponential times to failure)
    signals.py  stop when warned: SIGUSR1 (Slurm's --signal) or SIGTERM set a flag, an all-reduce
                makes every rank stop after the same step, save it and exit 75 (STOPPED_ON_SIGNAL)
    batch.py    lab 10's Slurm jobs (requeue.sbatch: a time limit mid-training, requeued and
                resumed; node_loss.sbatch: a node killed, the job requeued and resumed): submit
                now, collect later (segments, log lines, final digest), the reference run
    goodput.py  how often to save: Young's and Daly's intervals, goodput measured under seeded
                kills against the models, its table, sentences and plot
    exercise_resume.py  notebook 10's exercise (10-resume): the student's app state, in lab 10's
                training on 2 ranks killed or stopped at an unseen step, then resumed; the check
    resume_judge.py  what that check decides: each piece of state right after the resume
                (parameters, Adam, each RNG, step, data position) against the uninterrupted run's
    lab_runs.py notebook 10's runs of lab 10 (stop and resume, one part left out, reshard 4 ->
                2, 3, 1 and dcp_to_torch, restarts by torchrun or the course's launch) and their numbers;
                findings.py their sentences (and the Slurm job's); plots.py their loss curves

Used by lab course/labs/10_checkpoint/ and notebook 10 (10_checkpoints_and_restarts.ipynb).
"""
