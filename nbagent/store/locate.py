"""From what a user types (a notebook, a store folder, a folder, nothing) to the stores it means."""

from __future__ import annotations

from pathlib import Path

from nbagent.store.errors import NotAStore, StoreError
from nbagent.store.store import STORE_SUFFIX, store_path_for


def find_stores(path: str | Path | None) -> list[Path]:
    """Stores named by PATH; PATH omitted means the stores of the notebooks in the current folder."""
    if path is None:
        return _stores_in(Path.cwd(), explicit=False)
    p = Path(path)
    if p.suffix == ".ipynb":
        store = store_path_for(p)
        if store.is_symlink():
            return [store]  # (opening it says why it is refused: readers and writers follow no store-folder link)
        if not store.is_dir():
            if not p.exists():
                raise StoreError(f"{p}: no such notebook")
            raise StoreError(f"{p}: this notebook has no agent log yet (expected {store}); run an %%agent cell first")
        return [store]
    if not p.exists():
        raise StoreError(f"{p}: no such file or folder")
    if p.is_dir() and (p.suffix == STORE_SUFFIX or (p / "meta.json").exists() or (p / "events.jsonl").exists()):
        return [p]
    if p.is_dir():
        return _stores_in(p, explicit=True)
    if p.name in {"events.jsonl", "tables.json", "meta.json"} and p.parent.suffix == STORE_SUFFIX:
        return [p.parent]
    raise NotAStore(p, "it is a plain file")


def _stores_in(folder: Path, *, explicit: bool) -> list[Path]:
    stores = sorted(d for d in folder.glob("*" + STORE_SUFFIX) if d.is_dir() or d.is_symlink())
    if not stores:
        raise StoreError(f"{folder}: no agent logs here (no *{STORE_SUFFIX} folders); pass a notebook or a store")
    return stores
