"""The reference in docs/reference.md is the real `--help` output of every magic and command: it cannot drift.

Regenerate it with `python tests/test_docs.py` after changing an option.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "docs" / "reference.md"


def helps() -> list[tuple[str, str]]:
    os.environ["COLUMNS"] = "100"  # argparse wraps to the terminal's width
    from nbagent.cli.commands import build_parser
    from nbagent.ipython.options import cell_parser, line_parser

    out = [("%%agent --help", cell_parser().format_help()), ("%agent --help", line_parser().format_help())]
    cli = build_parser()
    out.append(("nbagent --help", cli.format_help()))
    sub = cli._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    out += [(f"nbagent {name} --help", p.format_help()) for name, p in sub.items()]
    return out


def render() -> str:
    parts = [
        "# Reference\n",
        "The `--help` of every magic and command, exactly as they print it (a test compares this file with the "
        "real output; regenerate it with `python tests/test_docs.py`). Concepts are in `concepts.md`, the magics "
        "in `jupyter.md`, the command line in `cli.md`.\n",
    ]
    for title, text in helps():
        parts.append(f"## `{title}`\n\n```\n{text.rstrip()}\n```\n")
    return "\n".join(parts)


def test_reference_matches_the_real_help() -> None:
    assert REFERENCE.read_text() == render(), "docs/reference.md is stale: run `python tests/test_docs.py`"


def test_every_option_is_explained_in_the_guides() -> None:
    guides = (ROOT / "docs" / "jupyter.md").read_text() + (ROOT / "docs" / "cli.md").read_text()
    for title, text in helps():
        for flag in set(re.findall(r"(?<![\w-])(--[a-z][a-z-]+)", text)) - {"--help"}:
            assert flag in guides, f"{flag} of {title} is not explained in jupyter.md or cli.md"


def test_docs_links_resolve() -> None:
    for md in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]:
        for target in re.findall(r"\]\((?!https?://|#)([^)#\s]+)", md.read_text()):
            assert (md.parent / target).exists(), f"{md.name} links to missing {target}"


if __name__ == "__main__":
    REFERENCE.write_text(render())
    print(f"wrote {REFERENCE}", file=sys.stderr)
