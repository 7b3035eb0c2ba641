"""Papermill parameters as nbagent settings: `papermill nb.ipynb out.ipynb -p approve all` does what it says.

Papermill runs a notebook with `-p NAME VALUE` by inserting a cell that assigns the values as Python variables
(tagged `injected-parameters`, after the cell tagged `parameters`, and starting with the comment line
`# Parameters`). The kernel never sees cell tags (papermill's nbclient sends none, nor a cell id), so nbagent
recognises such a cell by what papermill writes, and only where papermill can have written it:

- the source's first line is exactly `# Parameters`, and every statement after it is `name = <a literal>`;
- the kernel was given no cell id for it (papermill and plain nbclient send none; JupyterLab, VS Code and
  `nbagent run` always do, so an ordinary cell of an interactive notebook is never taken for one).

From such cells (later ones win, as the injected cell wins over the `parameters` cell) nbagent reads `model`,
`approve`, `autonomy`, `max_steps` and `budget`, and `nbagent_<setting>` for every setting (`nbagent_model`,
`nbagent_script`, `nbagent_session`...; the prefixed name wins over the plain one). Values are checked like
`%agent config` checks them; a bad one fails the next `%%agent` cell with one line naming it. Cells run before
`%load_ext nbagent` count too (their source is in IPython's `In`).
"""

from __future__ import annotations

import ast
from typing import Any

from nbagent.ipython.options import SETTINGS, UsageError, set_override

MARKER = "# Parameters"
PLAIN = ("model", "approve", "autonomy", "max_steps", "budget")


def read_cell(source: str) -> dict[str, Any] | None:
    """Every name a papermill-shaped parameters cell assigns, with its value; None when `source` is not one."""
    text = source.strip()
    if not text or text.splitlines()[0].strip() != MARKER:
        return None
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    values: dict[str, Any] = {}
    for stmt in tree.body:
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
            return None
        try:
            values[stmt.targets[0].id] = _literal(stmt.value)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return None
    return values


def _literal(node: ast.expr) -> Any:
    """A literal, or the `float('nan')` / `float('inf')` papermill writes for NaN and infinities (a parameter the
    notebook passes through): no call of anything else is ever evaluated."""
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "float"
            and len(node.args) == 1 and not node.keywords and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
            and node.args[0].value.strip().lower() in ("nan", "inf", "-inf", "+inf", "infinity", "-infinity")):
        return float(node.args[0].value)
    return ast.literal_eval(node)


def settings_of(values: dict[str, Any]) -> dict[str, Any]:
    """The nbagent settings among a parameters cell's names (`nbagent_<name>` over the plain name)."""
    out: dict[str, Any] = {}
    for name in SETTINGS:
        for key in (f"nbagent_{name}", name) if name in PLAIN else (f"nbagent_{name}",):
            if key in values and values[key] is not None:
                out[name] = values[key]
                break
    return out


class Parameters:
    """The settings papermill gave this kernel: name -> (value, where), and the bad ones, said at the next run."""

    def __init__(self) -> None:
        self.values: dict[str, tuple[Any, str]] = {}
        self.errors: dict[str, str] = {}

    def observe(self, source: str, count: int | None) -> None:
        values = read_cell(source)
        if values is None:
            return
        where = f"papermill parameter (cell [{count}])" if count else "papermill parameter"
        for name, value in settings_of(values).items():
            self.errors.pop(name, None)
            try:
                checked: dict[str, Any] = {}
                set_override(checked, f"{name}={value}")
                self.values[name] = (checked[name], where)
            except UsageError as exc:
                self.values.pop(name, None)
                message = str(exc).removeprefix("%agent config: ")
                self.errors[name] = f"{where}: {name} = {value!r}: {message}"

    def scan(self, inputs: Any, before: int | None = None) -> None:
        """Read the parameters cells among the sources of cells already run (IPython's `In`)."""
        if not isinstance(inputs, list):
            return
        for count, source in enumerate(inputs[:before]):
            if count and isinstance(source, str) and source.lstrip().startswith(MARKER):
                self.observe(source, count)

    def check(self) -> None:
        if self.errors:
            raise UsageError("%%agent: " + next(iter(self.errors.values())))

    def as_dict(self) -> dict[str, tuple[Any, str]]:
        return dict(self.values)
