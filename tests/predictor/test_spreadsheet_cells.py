"""Spreadsheet cells: a cell that would run as a formula is escaped, numbers and plain text are not,
and ``latpred predict --format csv`` writes a graph file's hostile name escaped."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import replace
from decimal import Decimal
from pathlib import Path

import pytest
from click.testing import CliRunner

from predictor.cli import commands
from predictor.spreadsheet_cells import SpreadsheetWriter, fixed, safe_cell
from predictor.zoo import load_zoo_graph

#: the payloads of issue #13, and the other starts OWASP lists (line feed) or ASVS adds (NUL)
FORMULAS = ["+cmd|' /C calc'!A0", "-2+3", "@SUM(1)", '=HYPERLINK("x")', "\t=1+1", "\r=1+1", "\n=1+1", "\0=1+1"]


@pytest.mark.parametrize("text", FORMULAS)
def test_a_cell_that_starts_like_a_formula_gets_a_single_quote(text: str) -> None:
    escaped = safe_cell(text)
    assert escaped.startswith("'")
    # after a leading line break, the next line is escaped too (each line is escaped as a cell is)
    assert escaped == ("'" + text if text[0] not in "\r\n" else "'" + text[0] + "'" + text[1:])


@pytest.mark.parametrize("text", ["-2.5", "+3", "-0.0001", "1e-3", "-1.5E+10", ".5", "-.5", "42"])
def test_a_number_stays_as_it_is(text: str) -> None:
    assert safe_cell(text) == text


@pytest.mark.parametrize("text", ["resnet50", "", "nas-112", "org/model:fp16 (v2)", "a=1", "x-1", "'=quoted"])
def test_text_that_does_not_start_like_a_formula_is_unchanged(text: str) -> None:
    assert safe_cell(text) == text


@pytest.mark.parametrize(("text", "expected"), [
    ("-1 ", "'-1 "), ("-inf", "'-inf"), ("+1,000", "'+1,000"), ("-5%", "'-5%"), ("--1", "'--1"),
])
def test_only_a_whole_plain_number_is_exempt(text: str, expected: str) -> None:
    assert safe_cell(text) == expected


@pytest.mark.parametrize(("text", "expected"), [
    ("ok\n=1+1", "ok\n'=1+1"), ("ok\r\n@A1", "ok\r\n'@A1"), ("ok\r-2+3", "ok\r'-2+3"),
    ("=a\n=b", "'=a\n'=b"), ("a\n\n=b", "a\n\n'=b"), ("a\n-2.5", "a\n-2.5"), ("a\nb", "a\nb"),
])
def test_each_line_of_a_cell_is_escaped_as_a_cell_is(text: str, expected: str) -> None:
    assert safe_cell(text) == expected


def test_the_writer_quotes_and_escapes_text_and_writes_numbers_bare() -> None:
    out = io.StringIO()
    writer = SpreadsheetWriter(out)
    writer.writerow(["=1+2\";=1+2", "a;=b", 8, fixed(0.51234), fixed(-2.5), None, "h200", "ok\n=1"])
    text = out.getvalue()
    # OWASP's own example, "=1+2";=1+2, escaped as they show it; a semicolon stays inside its quotes
    assert text == '"\'=1+2"";=1+2","a;=b",8,0.5123,-2.5000,"","h200","ok\n\'=1"\r\n'
    assert next(csv.reader(io.StringIO(text))) == ["'=1+2\";=1+2", "a;=b", "8", "0.5123", "-2.5000", "", "h200",
                                                   "ok\n'=1"]


def test_fixed_is_a_decimal_with_the_places_asked_for() -> None:
    assert fixed(1 / 3) == Decimal("0.3333") and str(fixed(2.0, 2)) == "2.00"


def test_cli_csv_escapes_a_graph_files_formula_name(tmp_path: Path) -> None:
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(replace(load_zoo_graph("alexnet"), name="=1+1").to_json()))
    result = CliRunner().invoke(commands, ["predict", str(path), "--format", "csv", "--batch", "2"])
    assert result.exit_code == 0, result.output
    assert "\"'=1+1\"," in result.stdout
    header, row = list(csv.reader(io.StringIO(result.stdout)))
    cells = dict(zip(header, row))
    assert cells["model"] == "'=1+1" and cells["batch"] == "2"
    assert float(cells["low_ms"]) <= float(cells["total_ms"]) <= float(cells["high_ms"])
    assert not any(line.startswith(("=", "+", "-", "@")) for line in result.stdout.splitlines())
