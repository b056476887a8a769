"""Which graph names the service takes: names that read the same in a URL, a log line and a sheet.

A graph's name comes back in every answer about it, and in ``GET /v1/latency``'s CSV as the
first cell of its rows, which spreadsheet users open; a name such as ``=HYPERLINK(...)`` or
``+cmd|' /C calc'!A0`` is a formula there. The CSV escapes such cells anyway
(``predictor/spreadsheet_cells.py``); refusing them when a graph is given to the service means a
stored name is shown as it was given, and that no name has to be escaped to be read.

The rule is the service's, at its door (inline graphs of ``POST /v1/predict`` and
``/v1/predict/batch``, ``POST /v1/graphs``, the ``name`` of an ONNX upload or, without one, the
ONNX file's own graph name), not the graph IR's: the IR is also made from local ONNX files and
torch modules, whose names the CLI takes as they are, and escapes in its CSV. Every zoo and NAS
suite name (``resnet50``, ``qwen2-0.5b``, ``nas-112``), the names exporters give (``main_graph``,
``torch-jit-export``) and file stems such as ``my model (v2)`` or ``org/model:fp16`` pass.
"""

from __future__ import annotations

import re

from service.problems import ProblemError

#: A letter, digit or underscore first (no formula character, separator, quote or space can
#: start a name), then those, spaces and ``. - + ( ) [ ] / : # @``. Letters and digits are
#: Unicode ones (Python's ``\w``): a name may be in any script, but holds no control character,
#: no invisible or direction-changing format character, and no comma, semicolon or quote.
SAFE_NAME = re.compile(r"\w[\w .+\-()\[\]/:#@]*")
RULE = ("a graph name starts with a letter, digit or underscore and holds only letters, digits, spaces "
        "and . _ - + ( ) [ ] / : # @ (a spreadsheet runs a cell that starts with = + - @ as a formula)")


#: the rule as the request documents' pattern (checked by ``check_graph_name``, whose message says it)
NAME_PATTERN = f"^{SAFE_NAME.pattern}$"


def check_graph_name(name: str, field: str, origin: str = "") -> str:
    """``name`` if it is safe (``SAFE_NAME``, whole); else a 422 problem naming ``field``, which
    says the rule and, through ``origin``, where the name came from when the request did not
    say it (an ONNX file's own graph name)."""
    if SAFE_NAME.fullmatch(name):
        return name
    shown = repr(name) if len(name) <= 80 else repr(name[:80]) + "..."
    raise ProblemError(422, f"{origin}{shown} is not a name this service takes: {RULE}", field=field,
                       kind="unsafe-name")
