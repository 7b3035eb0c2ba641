"""A cell's outputs through the one redactor (nbagent/secrets/redactor.py), as they leave the kernel: the agent's
cells on
IOPub (nbagent/ipython/cell_redaction.py) and in the notebook `nbagent run` writes (nbagent/cli/run_cells.py)."""

from __future__ import annotations

from typing import Any

from nbagent.secrets.redactor import Redactor

__all__ = ["redact_output"]


# MIME types whose values are encoded bytes (base64), never text: redacting them could only corrupt them
_BINARY_PREFIXES = ("image/", "audio/", "video/", "font/")
_BINARY_TYPES = {"application/pdf", "application/octet-stream", "application/zip", "application/x-hdf5"}


def _binary(mime: str) -> bool:
    return (mime.startswith(_BINARY_PREFIXES) and not mime.endswith(("+xml", "+json"))) or mime in _BINARY_TYPES


def redact_output(redactor: Redactor, output: dict[str, Any]) -> dict[str, Any]:
    """A cell's output (an nbformat output, or the content of an IOPub display_data, update_display_data,
    execute_result or error) with its text redacted: every text-like MIME value (text/plain, text/html,
    text/markdown, image/svg+xml, application/javascript...), a JSON value (application/json, *+json) as a
    structure, the metadata, a stream's text, an error's ename, evalue and traceback lines. Encoded bytes (PNG,
    JPEG, PDF...) are kept as they are; so are the keys that route the output (name, transient, counts)."""
    out = dict(output)
    data = output.get("data")
    if isinstance(data, dict):
        out["data"] = {mime: value if _binary(str(mime)) and isinstance(value, str) else redactor.redact(value)
                       for mime, value in data.items()}
    if isinstance(output.get("metadata"), dict):
        out["metadata"] = redactor.redact(output["metadata"])
    for key in ("text", "ename", "evalue"):
        if isinstance(output.get(key), str):
            out[key] = redactor.text(output[key])
    if isinstance(output.get("traceback"), list):
        out["traceback"] = [redactor.text(line) if isinstance(line, str) else line for line in output["traceback"]]
    return out
