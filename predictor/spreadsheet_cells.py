"""CSV that a spreadsheet opens as data: no cell we write can run as a formula.

Our CSV is made to be opened in Excel or read by Google Sheets' ``IMPORTDATA``, and one of its
cells is a graph's name, which whoever stored the graph chose. A spreadsheet runs a cell that
starts with ``=``, ``+``, ``-`` or ``@`` as a formula (``=HYPERLINK(...)`` leaks the sheet's
other cells, ``=cmd|' /C calc'!A0`` asks Excel to start a program): "CSV injection". OWASP's
advice (https://owasp.org/www-community/attacks/CSV_Injection) is followed here:

- a text cell that starts with ``=``, ``+``, ``-``, ``@``, tab (0x09), carriage return (0x0D)
  or line feed (0x0A), OWASP's list, or NUL (0x00), which OWASP ASVS 5.0 requirement 1.2.10
  adds, gets a single quote in front, which spreadsheets read as "this cell is text" and do not
  show. A cell that is a plain decimal number (``-2.5``, ``+3``, ``1e-3``) is a number to the
  spreadsheet whatever its sign, and is left as it is; ``-2+3`` is not a number, and is escaped.
- every text cell is quoted, its double quotes doubled (RFC 4180, sections 2.5 to 2.7; OWASP's
  "wrap each cell field in double quotes"), so a separator inside a cell cannot start a new cell
  with a formula in it: not our comma, and not the semicolon that Excel splits on where the
  locale's list separator is one. Numbers are written bare, so they stay numbers.
- a line break inside a quoted cell stays in the cell for every reader that honours quotes (all
  spreadsheets do), but it still starts a new line of the file, and a reader that goes line by
  line would take what follows it for a row's first cell: each line of a cell is escaped as a
  cell is. Separators inside a cell are not escaped the same way: the quotes answer them, and
  every reader that splits on them without honouring quotes also splits our quoted numbers.

Escaping changes what a reader sees (``'=1+1``); names the service is given are refused before
they get here (``service/graph_names.py``), so this is for names from before that rule, names
a local file gives the CLI, and every other text cell, which we check whatever it holds.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable
from decimal import Decimal
from typing import Protocol

#: First characters that make a spreadsheet read a cell as a formula (OWASP's list), and NUL (ASVS).
FORMULA_STARTS = frozenset("=+-@\t\r\n\0")
#: A plain decimal number, optionally signed: what a spreadsheet reads as a number, not a formula.
_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
#: A line break, kept by ``split`` (the capturing group) so that the cell can be put back together.
_BREAK = re.compile(r"(\r\n|\r|\n)")

#: What a cell may be: text is escaped and quoted; numbers (``fixed`` for decimals) are written bare.
Cell = str | int | Decimal | None


class Writable(Protocol):
    def write(self, text: str, /) -> object: ...


def _escape_start(text: str) -> str:
    if text[:1] in FORMULA_STARTS and not _NUMBER.fullmatch(text):
        return "'" + text
    return text


def safe_cell(text: str) -> str:
    """``text`` as a cell no spreadsheet runs: a single quote before it where it starts like a
    formula (and is not a number), and before each of its lines that does (see the module's
    docstring for why lines too). Text that needs no escape comes back unchanged."""
    cell = _escape_start(text)
    if "\n" not in cell and "\r" not in cell:
        return cell
    parts = _BREAK.split(cell)  # lines at even indices, the breaks between them at odd ones
    return "".join(part if i % 2 else _escape_start(part) for i, part in enumerate(parts))


def fixed(value: float, places: int = 4) -> Decimal:
    """``value`` as a number cell with ``places`` decimals (``0.5123``): written bare, without
    quotes, so that a spreadsheet reads it as a number."""
    return Decimal(f"{value:.{places}f}")


class SpreadsheetWriter:
    """A ``csv.writer`` whose text cells are escaped (``safe_cell``) and quoted, and whose
    numbers are bare: every CSV row latpred writes goes through one of these."""

    def __init__(self, stream: Writable, lineterminator: str = "\r\n") -> None:
        # QUOTE_NONNUMERIC quotes every cell that is not a number (int, Decimal), text and empty alike
        self._writer = csv.writer(stream, quoting=csv.QUOTE_NONNUMERIC, lineterminator=lineterminator)

    def writerow(self, cells: Iterable[Cell]) -> None:
        """Write one row; ``None`` is an empty cell."""
        self._writer.writerow([safe_cell(c) if isinstance(c, str) else "" if c is None else c for c in cells])
