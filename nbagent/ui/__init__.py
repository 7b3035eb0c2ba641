"""How runs are shown: the shared view state, the static record, and (in a kernel) the live widget."""
