"""The last step of every GPU measurement in bench/: the --json file and the DLTUTOR_METRICS line
(scripts/gpu_record.py merge --measurement FILE puts the file into a verification record)."""
from __future__ import annotations

import json
from pathlib import Path


def emit(out: dict, path: Path | None, skip=()) -> None:
    """Write `out` to `path` (when given) and print it as one `DLTUTOR_METRICS {json}` line,
    without the keys in `skip` (long curves stay in the file)."""
    if path:
        Path(path).write_text(json.dumps(out, indent=1))
    print("DLTUTOR_METRICS " + json.dumps({k: v for k, v in out.items() if k not in skip}),
          flush=True)
