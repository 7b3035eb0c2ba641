"""Another attack round on "secrets never reach the notebook file through nbagent's cells" (docs/configuration.md,
"Redaction"): a secret as a JSON display's key, in LaTeX, in a display's metadata, in JavaScript, in a custom
`+json` type, in an updated display's metadata; and a run_cell call whose code holds a quoted password (its
arguments used to be redacted into invalid JSON, so the cell never ran). One real kernel, the scripted model.

Not the redactor's job, so not asserted: a secret the agent's code encodes (base64, reversed, split between stdout
and stderr): code that means to hide a secret from a pattern can, and the card says run_cell can reach anything.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import test_cell_output_secrets as base
from kernel_harness import RecordingKernel

from nbagent.secrets.redactor import REDACTED

KEY = base.KEY

DISPLAYS = '''import os
from IPython.display import display, JSON, Latex, HTML, Javascript
key = os.environ["MY_SERVICE_API_KEY"]
display(JSON({key: "alice", "nested": {key: [key]}}))
display(Latex("$" + key + "$"))
display(HTML("<p>plain</p>"), metadata={"note": key, "deep": {"list": [key]}})
display(Javascript("var k = '" + key + "';"))
display({"application/vnd.custom+json": {"k": key}, "text/plain": "custom"}, raw=True)
handle = display(HTML("<p>first</p>"), display_id=True)
handle.update(HTML("<p>second</p>"), metadata={"why": key})
'''
PASSWORD = '''print("password: hunter2-not-in-the-environment")
'''


@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RecordingKernel, list[str], Any]]:
    k = base.FrontEndKernel(tmp_path_factory.mktemp("secrets_attack"), env=base.ENV)
    try:
        assert k.run("%load_ext nbagent", cell_id="setup").ok
        ids, request = base.run_agent(k, DISPLAYS, PASSWORD, cell_id="ask")
        yield k, ids, request
    finally:
        k.close()


def test_a_secret_as_a_json_key_in_latex_metadata_or_javascript_leaves_the_kernel_redacted(
        ran: tuple[RecordingKernel, list[str], Any]) -> None:
    k, (displays, _), _ = ran
    msgs = k.by_parent[displays]
    # Was: the JSON display's keys went out as they were: {"s3cr3t-value-...": "alice", "nested": {...}}
    for m in msgs:
        assert KEY not in json.dumps(m["content"]), m
    outputs = base.shown(msgs)
    data = [o["data"] for o in outputs if o["output_type"] == "display_data"]
    assert data[0]["application/json"] == {REDACTED: "alice", "nested": {REDACTED: [REDACTED]}}
    assert data[1]["text/latex"] == f"${REDACTED}$"
    metadata = [o.get("metadata") for o in outputs if o["output_type"] == "display_data"]
    assert metadata[2] == {"note": REDACTED, "deep": {"list": [REDACTED]}}
    assert data[3]["application/javascript"] == f"var k = '{REDACTED}';"
    assert data[4]["application/vnd.custom+json"] == {"k": REDACTED}
    assert data[5]["text/html"] == "<p>second</p>" and metadata[5] == {"why": REDACTED}


def test_a_quoted_password_in_run_cell_s_code_runs_as_the_card_showed(
        ran: tuple[RecordingKernel, list[str], Any]) -> None:
    """The card and the log show the code with the password `[REDACTED]`; that is the code that runs (the run is a
    fold of its log); it runs, and prints what it says."""
    k, (_, password), request = ran
    # Was: run_cell failed with InvalidToolCall: arguments are not valid JSON (Expecting ',' delimiter...)
    printed = "".join(o.get("text", "") for o in base.shown(k.by_parent[password]))
    assert printed == f"password: {REDACTED}\n"
    [record] = request.records
    steps = json.dumps(record["steps"])
    assert "InvalidToolCall" not in steps and "hunter2" not in steps
    assert f'print(\\"password: {REDACTED}\\")' in steps  # what the card showed
