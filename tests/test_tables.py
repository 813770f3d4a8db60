"""The one table formatter of the course (dltutor.core.tables.format_table)."""
from dltutor.core.tables import format_table


def test_columns_align_numbers_right_and_text_left():
    rows = [{"run": "horovod x1", "img_s": 20.64, "n": 1, "speedup": 1.0},
            {"run": "ddp x2", "img_s": 1271.4, "n": 12000, "speedup": None}]
    lines = format_table(rows, ["run", "img_s", "n", "speedup"], title="T").splitlines()
    assert lines[0] == "T"
    assert lines[1].split() == ["run", "img_s", "n", "speedup"]
    assert set(lines[2]) <= {"-", " "}
    assert lines[3].startswith("horovod x1") and lines[3].rstrip().endswith("1")
    assert "20.6" in lines[3] and "1,271" in lines[4] and "12,000" in lines[4]
    assert lines[4].rstrip().endswith("-")                    # None prints as `missing`
    assert len({len(line) for line in lines[1:3]}) == 1       # header and rule line up


def test_digits_headers_and_left_columns():
    rows = [{"a": 0.123456, "b": "ok"}]
    out = format_table(rows, ["a", "b"], headers={"a": "alpha"}, digits={"a": 4}, left=("b",),
                       missing="n/a")
    assert "alpha" in out and "0.1235" in out
    assert format_table([], ["x"]).splitlines()[0] == "x"


def test_table_is_html_in_jupyter_and_the_same_text_under_print():
    from dltutor.core.tables import Table
    rows = [{"rank": 1, "ms": 125.4321, "msg": "a<b"}]
    t = Table(rows, ["rank", "ms", "msg"], title="T", digits={"ms": 1})
    assert str(t) == format_table(rows, ["rank", "ms", "msg"], title="T", digits={"ms": 1})
    html = t._repr_html_()
    assert "<b>T</b>" in html and "<td>125.4</td>" in html and "a&lt;b" in html
    assert '<td style="text-align:left">1</td>' in html        # the first column flush left


def test_show_table_is_an_html_table_in_a_kernel_and_text_in_a_terminal(capsys):
    """A notebook's table renders as a table (text/html beside the aligned text/plain); a lab or
    a terminal prints the aligned text."""
    from dltutor.core.tables import show_table
    rows = [{"rank": 0, "ms": 1.5}, {"rank": 1, "ms": 12.25}]
    show_table(rows, ["rank", "ms"], title="T")
    assert capsys.readouterr().out.strip() == format_table(rows, ["rank", "ms"], title="T")

    from nbclient import NotebookClient
    import nbformat
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "from dltutor.core.tables import show_table\n"
        "show_table([{'rank': 0, 'ms': 1.5}, {'rank': 1, 'ms': 12.25}], ['rank', 'ms'], title='T')")])
    NotebookClient(nb, timeout=120, kernel_name="python3").execute()
    shown = [o for o in nb.cells[0].outputs if o.output_type == "display_data"]
    assert len(shown) == 1 and not [o for o in nb.cells[0].outputs if o.output_type == "stream"]
    html = shown[0].data["text/html"]
    assert "<table>" in html and "<td>1.5</td>" in html and '<th style="text-align:left">rank</th>' in html
    assert shown[0].data["text/plain"] == format_table(rows, ["rank", "ms"], title="T")
