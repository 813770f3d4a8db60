"""Strip outputs and execution counts from notebooks: `python scripts/strip_notebooks.py NB...`."""
import sys

import nbformat


def strip(path: str) -> bool:
    nb = nbformat.read(path, as_version=4)
    changed = False
    for cell in nb.cells:
        if cell.cell_type == "code" and (cell.get("outputs") or cell.get("execution_count")):
            cell.outputs, cell.execution_count, changed = [], None, True
    if changed:
        nbformat.write(nb, path)
    return changed


if __name__ == "__main__":
    for p in sys.argv[1:]:
        print(("stripped " if strip(p) else "clean    ") + p)
