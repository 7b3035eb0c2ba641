"""Which files of the notebook's folder a configured stdio server runs or may run (`entry_files`).

Starting a server runs or reads these files, so they are code: the host hands them to the runtime's runs-later
rule (a write of one is WRITE_HIGH_RISK), and their contents are part of what a person's trust covers (trust.py).
Kept apart from the trust itself because reading a command line for the paths it names is its own small parser.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

from nbagent.mcp.config import ServerConfig


def server_cwd(config: ServerConfig, folder: Path | None) -> Path | None:
    """The folder the server starts in: its cwd, relative to the notebook's folder, or that (the server starts
    there, its rules resolve relative paths there, its entry files are looked for there)."""
    if not config.cwd:
        return folder
    path = Path(config.cwd).expanduser()
    return path if path.is_absolute() or folder is None else folder / path


def _inside(path: Path, root: Path) -> bool:
    lexical, top = os.path.normpath(path), os.path.normpath(root)
    real, real_top = os.path.realpath(path), os.path.realpath(root)
    return any(p != t and p.startswith(t.rstrip(os.sep) + os.sep) for p, t in ((lexical, top), (real, real_top)))


# a command that runs the file its first argument names (`sh tools/serve.sh`, `node server.js`)
_INTERPRETER = re.compile(r"(?:(?:ba|da|z|k|c|tc|fi)?sh|python[0-9.]*|pypy[0-9.]*|node(?:js)?|deno|bun|ruby|perl|"
                          r"php|rscript|julia|lua(?:jit)?|pwsh|powershell|tsx|ts-node|groovy|tclsh|wish)(?:\.exe)?",
                          re.IGNORECASE)
# names of files that are code or that configure what runs (a data file a server writes, its database or its log,
# is none of these: its every change would otherwise undo the trust)
_CODE_SUFFIX = re.compile(r"\.(?:sh|bash|zsh|ksh|fish|py|pyw|pyz|pyc|ipy|js|mjs|cjs|ts|mts|cts|jsx|tsx|rb|pl|pm|php|"
                          r"lua|r|jl|ps1|psm1|bat|cmd|exe|com|jar|class|go|java|kt|kts|scala|swift|dart|ex|exs|tcl|groovy|"
                          r"wasm|so|dll|dylib|appimage|json|jsonc|json5|toml|ya?ml|ini|cfg|conf|env)$", re.IGNORECASE)


# an interpreter's options that take a value (the word after them is no script): python -W/-X, node -r (a module it
# loads: kept as code), sh -o; and the ones whose value is the code itself (-c/-e/--eval) or a module (-m)
_VALUE_OPTIONS = frozenset({"-W", "-X", "-o", "-O", "--require", "-r", "--import", "--loader", "-I"})
_CODE_OPTIONS = frozenset({"-c", "-e", "--eval", "-p", "--print"})
_PATHS = ("PATH",)
_MODULE_PATHS = ("PYTHONPATH", "NODE_PATH", "PERL5LIB", "RUBYLIB")
MAX_FOLDER_FILES = 500  # code files of one folder a server's modules come from, counted in its trust


def entry_files(config: ServerConfig, folder: str | Path | None) -> list[Path]:
    """The files inside the notebook's folder a stdio entry runs or may run, existing or not (a file that appears
    changes what runs too). Starting the server runs or reads them, so they are code (the host gives them to the
    runtime's runs-later rule) and their contents are part of the trust:

    - the command: a path, or a name looked up on the entry's own PATH (its `env`), then the kernel's;
    - an interpreter's script (its first word that is neither an option nor an option's value), every argument or
      `--option=value` named as code or configuration (`.sh`, `.py`, `.json`, `.toml`...) or executable, every
      path-like word of `-c`/`-e` code, a `-r` module;
    - a `-m module`: the module or package where Python looks first (the server's folder: one of the same name
      there shadows an installed one), every code file of that package;
    - the folders a script, a package, or the entry's PYTHONPATH / NODE_PATH name: their code files (and
      `sitecustomize.py`), at most MAX_FOLDER_FILES each.

    A data file it names (`--db-path data.db`, a log) is none of them."""
    if folder is None or not config.command:
        return []
    import shlex

    root = Path(folder)
    cwd = server_cwd(config, root) or root
    command = config.command
    words: list[tuple[str, bool]] = []  # (word, counts whatever its name)
    dirs: list[Path] = []  # folders whose code files count
    env_path = config.env.get("PATH")
    if os.sep in command or "/" in command:
        words.append((command, True))
    else:
        for entry in (env_path or "").split(os.pathsep):
            if entry:
                words.append((str(Path(entry) / command), True))  # existing or not: one made there would run
        found = sys.executable if command in ("python", "python3") else shutil.which(command)
        words.append((found or str(Path(sys.executable).parent / command), True))
    for key in _MODULE_PATHS:
        for entry in (config.env.get(key) or "").split(os.pathsep):
            if entry:
                dirs.append(Path(entry))
                words += [(str(Path(entry) / "sitecustomize.py"), True), (str(Path(entry) / "usercustomize.py"), True)]
    script = _INTERPRETER.fullmatch(os.path.basename(command)) is not None
    args = list(config.args)[:256]
    i = 0
    while i < len(args):
        arg = args[i]
        i += 1
        if not arg:
            continue
        if arg.startswith("-"):
            if "=" in arg:
                words.append((arg.split("=", 1)[1], False))
            if arg in _CODE_OPTIONS and i < len(args):  # `sh -c TEXT`: the paths its code names
                try:
                    tokens = shlex.split(args[i])
                except ValueError:
                    tokens = args[i].split()
                words += [(t, True) for t in tokens if "/" in t or _CODE_SUFFIX.search(t)]
                i, script = i + 1, False
            elif arg == "-m" and i < len(args):
                module = args[i].replace(".", "/")
                words += [(module + ".py", True), (module + "/__init__.py", True), (module + "/__main__.py", True)]
                dirs.append(Path(module))
                i, script = i + 1, False
            elif arg in _VALUE_OPTIONS and i < len(args):
                words.append((args[i], arg in ("--require", "-r", "--import", "--loader")))
                i += 1
            continue
        if script:
            words.append((arg, True))
            dirs.append(Path(arg).parent)  # the script's own folder comes first on its import path
            script = False
        else:
            words.append((arg, False))
    out: list[Path] = []
    for word, always in words:
        if not word or "\0" in word or "\n" in word:
            continue
        path = Path(word).expanduser()
        path = path if path.is_absolute() else cwd / path
        try:
            if path in out or path.is_dir() or not _inside(path, root):
                continue
            if always or _CODE_SUFFIX.search(path.name) or (path.is_file() and os.stat(path).st_mode & 0o111):
                out.append(path)
        except (OSError, ValueError):
            continue
    for d in dirs:
        out += [p for p in _code_in(d if d.is_absolute() else cwd / d, root) if p not in out]
    return out


def _code_in(folder: Path, root: Path) -> list[Path]:
    """The code files of a folder inside the notebook's (and its sub-folders), at most MAX_FOLDER_FILES."""
    try:
        if not folder.is_dir() or not (_inside(folder, root) or os.path.realpath(folder) == os.path.realpath(root)):
            return []
    except OSError:
        return []
    out: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and not d.endswith(".nbagent"))
        for name in sorted(filenames):
            if _CODE_SUFFIX.search(name):
                out.append(Path(dirpath) / name)
                if len(out) >= MAX_FOLDER_FILES:
                    return out
    return out
