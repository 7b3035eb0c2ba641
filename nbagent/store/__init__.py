"""The event store: an append-only, hash-chained log in TinyDB beside the notebook (see store.py)."""

from nbagent.store.errors import (
    AppendOnly,
    NewerFormat,
    NotAStore,
    RunNotFound,
    StoreCorrupt,
    StoreError,
    StoreReadOnly,
    StoreWriteFailed,
)
from nbagent.store.store import FORMAT_VERSION, STORE_SUFFIX, RunRecord, SessionRecord, Store, store_path_for

__all__ = [
    "FORMAT_VERSION", "STORE_SUFFIX", "AppendOnly", "NewerFormat", "NotAStore", "RunNotFound", "RunRecord",
    "SessionRecord", "Store", "StoreCorrupt", "StoreError", "StoreReadOnly", "StoreWriteFailed", "store_path_for",
]
