"""The response header that names the host profiles an answer's eager predictions used.

Every eager answer names its host (``host`` in JSON and CSV), but ``format=txt`` answers a number
only: a spreadsheet asking for ``host=<id>`` could not tell that an estimate stood in for that
profile. ``Latpred-Host`` says it on every format: each distinct profile as the predictions name
it (id, label and CPU, and ``for <id>`` where it stood in for the one asked), separated by " | ";
``none`` where no prediction was eager.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

HOST_HEADER = "Latpred-Host"
#: the header as the OpenAPI document describes it
HOST_HEADER_DOC = {"description": "the host profiles the answer's eager predictions used, as their `host` names them "
                                  "(separated by ' | '), or `none`", "schema": {"type": "string"}}


def host_header(hosts: Iterable[str | None]) -> dict[str, str]:
    """The header for the predictions' ``host`` values (None for a CUDA graph's): a header holds
    printable ASCII on one line, so a profile's CPU name (free text in a posted profile) is escaped
    where it holds anything else."""
    named = list(dict.fromkeys(h for h in hosts if h))
    text = " | ".join(named) if named else "none"
    # printable ASCII only (gunicorn refuses a header with a control character: the whole answer failed)
    safe = "".join(c if " " <= c <= "~" else c.encode("unicode_escape").decode("ascii") for c in text)
    return {HOST_HEADER: " ".join(safe.split())}


__all__: Sequence[str] = ["HOST_HEADER", "HOST_HEADER_DOC", "host_header"]
