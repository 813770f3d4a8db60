"""Launched by tests/test_mutations_long_context.py: notebook 06's batch runner
(`dltutor.model_parallel.exercise_batch`: every answer in one launch, each in a process group of
its own) with notebook 09's two launched exercises added to the checks it knows."""
from dltutor.model_parallel import exercise_batch

CHECKS = {"09-ring-attention": "dltutor.context_parallel.exercise_ring",
          "09-moe-dispatch": "dltutor.experts.exercise_dispatch"}

if __name__ == "__main__":
    exercise_batch.EXERCISES.update(CHECKS)
    exercise_batch.main()
