"""Notebook 08's topic: debugging distributed runs — hangs, desyncs, silent divergence,
stragglers, NaN/inf and killed ranks, each made on purpose and found with the tool that finds it.

    faults.py           inside a rank: the faults lab 08 can inject (which rank, which step)
    checks.py           inside a rank: the cheap checks a student writes (fingerprints, checksums)
    flight.py           torch's Flight Recorder on gloo: the dump, re-keyed, and torch's analyzer
    stacks.py           py-spy dumps of the stuck ranks, taken from the kernel during a hang
    diagnose.py         from the ranks' reports and logs: which rank, which step, which cause
    runs.py             in the kernel: run lab 08 with one fault and time the first naming message
    findings.py         the sentences the notebook prints from a run's numbers
    straggler.py        the straggler runs said as one run each can: medians, ranges, rounded ratios
    scaling.py          loss scaling on overflows: torch's GradScaler and DeepSpeed's scaler, run
    hidden.py           how long each fault stayed hidden; the step tables of sections 3 and 5
    plots.py            the straggler's step anatomy; time from each fault to its first message
    exercise_diagnose.py  the exercise: name the rank and cause of an unseen broken run
    exercise_hang.py    the exercise: make a hanging script finish with the right result
    exercise_hang_judge.py  its verdict: the first case that hung, crashed or summed wrong

Used by notebook 08_debugging_distributed.ipynb and lab course/labs/08_debugging/.
"""
