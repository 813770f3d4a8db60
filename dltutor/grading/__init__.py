"""grading: the course's exercises as one set: verdicts, running the student's code, the report.

  verdict.py  Verdict: solved / not yet / wrong with the check's message; printed for the student
              and recorded in the notebook's output (metadata) for the instructor's report
  ranks.py    run the student's script on real ranks (the course launcher) and collect what they
              reported; an unfilled skeleton (NotImplementedError) is "not yet", a crash "wrong"
              with the first error in time across ranks (the cause) before its consequences
  attempts.py every check the student runs, kept in their home: tries and first solved time
  numbers.py  numbers are numbers: numpy scalars and one-element tensors accepted, floats refused
              where a whole number (a rank, a coordinate) is meant
  catalog.py  every exercise of the course: id, notebook, what the student writes, on how many ranks
  calls.py    inside the ranks: record the communication calls an exercise allows (shape, phase,
              what a send carried), refuse the others, so a check can count the messages
  report.py   the instructor's report from the students' executed notebooks: per student, per
              exercise, as an HTML table and a CSV (`python -m dltutor report FOLDER`)
  nbgrader.py the exercises as nbgrader assignments, one per notebook: the student's cell an answer
              cell, the course's check the autograder's test (`python -m dltutor nbgrader-course`)
  nbgrader_steps.py  nbgrader's round trip: release, collect, autograde and the gradebook's
              scores for the instructor; fetch and submit commands for the students
  handout.py  the nbgitpuller link that hands the course out: cloned into each student's home on
              the hub, notebook 01 opened (`gitpuller_link`)
"""
