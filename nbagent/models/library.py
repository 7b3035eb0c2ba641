"""Importing litellm: on first use only, with the environment it reads at import set for the import alone (no price
map fetched, no telemetry, no `.env` loaded), and what its first call imports besides, so a kernel's loader can
import that ahead (nbagent/models/process.py, nbagent/ipython/loading.py)."""

from __future__ import annotations

import os
from types import ModuleType

__all__ = ["FIRST_CALL", "import_litellm"]

# Read by litellm when it is imported: the price map from its own package, not fetched over the network; no
# telemetry; and no walk of every message to shorten base64 payloads for logs nbagent does not use (6 ms a call at
# 1,000 steps and growing). Set for the import only, unless set already: the environment is left as it was.
_IMPORT_ENV = {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_TELEMETRY": "False",
               "MAX_BASE64_LENGTH_FOR_LOGGING": "0"}
# Set for the import whatever they were, then put back: litellm's `__init__` calls python-dotenv's `load_dotenv()`
# in its "DEV" mode (the default), which fills the environment from the first `.env` found walking up from the
# working folder (a kernel) or from litellm's own install (a `.venv/` inside a project), so a cloned repository's
# `OPENAI_BASE_URL` would carry the person's key to another server. No dotfile steers the model layer:
# docs/configuration.md, "What nbagent reads". Not python-dotenv's own switch (PYTHON_DOTENV_DISABLED): where the
# import runs in a thread of the kernel, a cell's own `load_dotenv()` during those seconds would load nothing, and
# litellm's is its only call at import (tests/test_surroundings.py plants a `.env` at every level to hold it so).
_NO_DOTENV = {"LITELLM_MODE": "PRODUCTION"}


# what litellm's first call imports beyond `import litellm` (its proxy's file-id helpers, the stream builder's types,
# the openai client and handler): ~0.4 s that a first call would otherwise spend, imported ahead by whoever loads
# the library for a kernel (nbagent/models/process.py, nbagent/ipython/loading.py). Internal names of litellm 1.106.2,
# so each is best-effort. Not its tokenizer: importing that sets TIKTOKEN_CACHE_DIR in os.environ for good.
FIRST_CALL = ("litellm.proxy.openai_files_endpoints.common_utils",
              "litellm.types.litellm_core_utils.streaming_chunk_builder_utils", "litellm.llms.openai.openai",
              "litellm.llms.openai_like.dynamic_config", "openai.resources.chat")


def import_litellm() -> ModuleType:
    """litellm, imported on first use (in a kernel's model process, or in plain Python; nbagent/models/process.py)."""
    import sys

    if "litellm" in sys.modules and hasattr(sys.modules["litellm"], "acompletion"):
        return sys.modules["litellm"]
    from nbagent.shadowing import check

    check()  # a litellm.py (or openai/, httpx.py...) in the working folder would run here: refused, in one line
    added = {k: v for k, v in _IMPORT_ENV.items() if k not in os.environ}
    forced = {k: os.environ.get(k) for k in _NO_DOTENV}
    try:
        os.environ.update(added)
        os.environ.update(_NO_DOTENV)
        import litellm
    finally:
        for key, value in {**added, **_NO_DOTENV}.items():  # unless the person set it meanwhile (another cell)
            if os.environ.get(key) == value:
                before = forced.get(key)
                if before is None:
                    del os.environ[key]
                else:
                    os.environ[key] = before
    import logging

    if not os.environ.get("NBAGENT_LITELLM_DEBUG"):
        # litellm's own warnings (its logging worker, cost-map notes) are noise in a notebook; our events
        # record what matters. NBAGENT_LITELLM_DEBUG=1 brings them back.
        logging.getLogger("LiteLLM").setLevel(logging.ERROR)
    litellm.suppress_debug_info = True
    litellm.telemetry = False
    return litellm
