"""The one table of the course: rows of dicts in, aligned columns out.

    show_table(rows, ["variant", "img_per_s", "speedup", "status"], title="...")   # a notebook
    print(format_table(rows, ...))                                                 # a log, a lab

`show_table` renders an HTML table in Jupyter and the same aligned text anywhere else.

Numbers are right-aligned (floats to 3 significant digits, or `digits` decimals when given; ints
and floats from 1,000 up as whole numbers with thousands separators), text left-aligned in the first column and
right-aligned elsewhere unless listed in `left`; a missing or None value prints as `missing`. Column headers can be renamed with `headers`.
"""
from __future__ import annotations


def _cell(value, digits, missing: str) -> str:
    if value is None or value == "":
        return missing
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if value != value:          # nan: no value (e.g. a spread from one measurement)
            return "n/a"
        if digits is None:
            return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.3g}"
        return f"{value:,.{digits}f}"
    return str(value)


def format_table(rows: list[dict], columns=None, *, title: str = "", headers: dict | None = None,
                 digits: int | dict | None = None, left=(), missing: str = "-") -> str:
    """`rows` as aligned text; `digits`: None (3 significant), one count, or {column: count}."""
    columns = list(columns or (rows[0].keys() if rows else []))
    headers = headers or {}
    places = (lambda c: digits.get(c)) if isinstance(digits, dict) else (lambda c: digits)
    cells = [[headers.get(c, c) for c in columns]]
    cells += [[_cell(r.get(c), places(c), missing) for c in columns] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    flush_left = {columns[0], *left} if columns else set(left)

    def line(row):
        return "  ".join(x.ljust(w) if c in flush_left else x.rjust(w)
                         for x, w, c in zip(row, widths, columns)).rstrip()
    out = [title] if title else []
    out += [line(cells[0]), "  ".join("-" * w for w in widths)]
    out += [line(row) for row in cells[1:]]
    return "\n".join(out)


class Table:
    """`format_table`'s rows as an object: an HTML table in Jupyter (the last expression of a cell,
    or `display(...)`), the same aligned text under `print()` or in a terminal. `note`: a line
    under the table (what data, which hardware); `"text" in table` searches the text."""

    def __init__(self, rows: list[dict], columns=None, *, note: str = "", **options):
        self.rows, self.options, self.note = rows, options, note
        self.columns = list(columns or (rows[0].keys() if rows else []))

    def __str__(self) -> str:
        text = format_table(self.rows, self.columns, **self.options)
        return f"{text}\n{self.note}" if self.note else text

    __repr__ = __str__

    def __contains__(self, text: str) -> bool:
        return text in str(self)

    def _repr_html_(self) -> str:
        """The title in bold above (a caption would wrap at the table's width), text columns
        flush left as in the text form, the note below."""
        import html
        o = self.options
        digits, headers, missing = o.get("digits"), o.get("headers") or {}, o.get("missing", "-")
        places = (lambda c: digits.get(c)) if isinstance(digits, dict) else (lambda c: digits)
        flush_left = {self.columns[0], *o.get("left", ())} if self.columns else set()

        def align(c):
            return ' style="text-align:left"' if c in flush_left else ""
        head = "".join(f"<th{align(c)}>{html.escape(str(headers.get(c, c)))}</th>"
                       for c in self.columns)
        body = "".join("<tr>" + "".join(
            f"<td{align(c)}>{html.escape(_cell(r.get(c), places(c), missing))}</td>"
            for c in self.columns) + "</tr>" for r in self.rows)
        title = f"<p><b>{html.escape(o['title'].strip())}</b></p>" if o.get("title") else ""
        note = f"<p>{html.escape(self.note)}</p>" if self.note else ""
        return (f"<div>{title}<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
                f"{note}</div>")


def show_table(rows, columns=None, **options) -> None:
    """Show `rows` (or a ready `Table`) as a table: HTML in a Jupyter kernel, aligned text in a
    terminal or a log."""
    table = rows if isinstance(rows, Table) else Table(rows, columns, **options)
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:
        print(table)
        return
    if get_ipython() is None:
        print(table)
    else:
        display(table)
