# expect: wrong
# names: this run does not show
# why: looks for the fault's name in what the run object prints instead of reading the evidence
import re

WORDS = {"skip": "skipped collective", "straggler": "straggler", "outside": "divergence",
         "random": "divergence", "nan": "nan", "kill": "killed", "diverg": "divergence"}


def answer(run):
    text = repr(run) + " " + str(run) + " " + " ".join(dir(run))
    for attr in ("fault", "variant", "cause", "fault_rank", "__dict__"):
        text += " " + str(getattr(run, attr, ""))
    cause = next((c for word, c in WORDS.items() if word in text.lower()), "straggler")
    found = re.search(r"rank\D{0,3}(\d)", text)
    return {"rank": int(found.group(1)) if found else 0, "cause": cause}
