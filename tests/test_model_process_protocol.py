"""The model process's errors, as a property (nbagent/models/process.py; no process started here).

An error crosses from the model process to the kernel as JSON (`_describe`), and is raised again there (`_rebuild`).
Whatever the chain (litellm's classes wrapping the SDK's, HTTP statuses, connection errors and timeouts, any text),
the kernel must decide as it would in-process: the same class names, the same transient-or-not (retries), the same
message (what the run records and what a refusal for length is recognised by), and a missing package stays a
ModuleNotFoundError naming it (the one line that says what to install).
"""

from __future__ import annotations

import itertools
import json

from examples import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from nbagent.models import llm, reply
from nbagent.models import process as modelproc

NAMES = ["RateLimitError", "BadRequestError", "ContextWindowExceededError", "APIConnectionError", "Timeout",
         "InternalServerError", "ServiceUnavailableError", "AuthenticationError", "ValueError", "IncompleteStream"]


def _make(name: str, status: int | None, message: str, connection: bool, timeout: bool) -> Exception:
    bases: tuple[type, ...] = (Exception,)
    bases = ((ConnectionError,) if connection else ()) + ((TimeoutError,) if timeout else ()) + bases
    cls = type(name, bases, {"__module__": "litellm.exceptions"})
    exc = cls(message)
    if status is not None:
        exc.status_code = status  # type: ignore[attr-defined]
    return exc


link = st.tuples(st.sampled_from(NAMES), st.none() | st.sampled_from([400, 401, 404, 408, 409, 429, 500, 503]),
                 st.text(max_size=300), st.booleans(), st.booleans())


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(link, min_size=1, max_size=4), st.sampled_from(["cause", "original_exception", "context"]))
def test_an_error_chain_decides_the_same_in_the_kernel(chain: list[tuple], how: str) -> None:
    made = [_make(*item) for item in chain]
    for outer, inner in itertools.pairwise(made):
        if how == "cause":
            outer.__cause__ = inner
        elif how == "original_exception":
            outer.original_exception = inner  # type: ignore[attr-defined]  # litellm's way
        else:
            outer.__context__ = inner
    sent = json.loads(json.dumps(modelproc._describe(made[0])))
    again = modelproc._rebuild(sent)
    assert type(again).__name__ == type(made[0]).__name__
    assert llm.is_transient(again) == llm.is_transient(made[0])
    assert llm.error_message(again) == llm.error_message(made[0])
    assert [type(e).__name__ for e in reply.causes(again)] == [type(e).__name__ for e in reply.causes(made[0])]


def test_a_missing_package_stays_a_module_not_found_error_naming_it() -> None:
    try:
        import nbagent_provider_pkg_not_installed  # type: ignore[import-not-found]  # noqa: F401
    except ModuleNotFoundError as exc:
        again = modelproc._rebuild(json.loads(json.dumps(modelproc._describe(exc))))
    assert isinstance(again, ModuleNotFoundError) and again.name == "nbagent_provider_pkg_not_installed"


def test_an_empty_or_garbled_description_is_still_an_error() -> None:
    assert isinstance(modelproc._rebuild([]), modelproc.RemoteError)
    garbled = modelproc._rebuild([{"type": None, "status_code": "429", "message": None}])
    assert isinstance(garbled, modelproc.RemoteError) and garbled.status_code is None
