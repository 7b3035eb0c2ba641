"""`run_cell` given code that misbehaves (issue 27's bad input): a display that raises, a 50 MB image, megabytes of
prints. Each ends with a bounded, recorded outcome and a
kernel that still answers."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kernel_harness import Kernel, script

from nbagent.store import Store

pytestmark = [pytest.mark.kernel, pytest.mark.slow]
AGENT = "%%agent --script s.json --approve all --autonomy L3 --new\ngo"


@pytest.fixture
def k(kernel: Kernel) -> Kernel:
    """conftest's kernel: nbagent loaded."""
    return kernel


def agent(k: Kernel, code: str, cell_id: str = "c1", timeout: float = 180) -> list[Any]:
    """Run one run_cell call of `code` then an answer; the call's recorded outcomes (completed or failed)."""
    script(k.folder / "s.json", {"tool_calls": [{"name": "run_cell", "arguments": {"code": code}}]},
           {"content": "done"})
    cell = k.run(AGENT, cell_id=cell_id, timeout=timeout)
    assert cell.ok, (cell.stderr[-2000:], cell.outputs)
    store = Store(k.folder / "test.nbagent", readonly=True)
    return [e for rid in store.run_ids() for e in store.run_events(rid)
            if e.type in ("tool_call_completed", "tool_call_failed") and e.payload.tool == "run_cell"]


def alive(k: Kernel) -> None:
    probe = k.run("print(6 * 7)", cell_id="probe")
    assert probe.ok and probe.stdout == "42\n"


def test_a_display_that_raises_is_the_cells_error_and_the_kernel_goes_on(k: Kernel) -> None:
    code = ("class Bad:\n    def _repr_html_(self):\n        raise RuntimeError('no html for you')\n"
            "    def __repr__(self):\n        raise ValueError('no repr either')\n"
            "from IPython.display import display\nprint('before')\ndisplay(Bad())\nprint('after')")
    (e,) = agent(k, code)
    assert e.type == "tool_call_completed"
    r = e.payload.result
    assert r["stdout"].startswith("before") and "ValueError" in json.dumps(r)
    alive(k)


def test_a_value_whose_repr_raises_is_said_not_fatal(k: Kernel) -> None:
    (e,) = agent(k, "class Bad:\n    def __repr__(self):\n        raise ValueError('nope')\nBad()")
    assert e.type == "tool_call_completed" and "display_error" in e.payload.result
    alive(k)


def test_a_50_mb_image_is_bounded_in_the_result_and_the_log(k: Kernel) -> None:
    code = ("import base64\nfrom IPython.display import display\n"
            "blob = b'\\x89PNG\\r\\n\\x1a\\n' + bytes(50 * 1024 * 1024)\n"
            "display({'image/png': base64.b64encode(blob).decode()}, raw=True)\nprint('shown')")
    (e,) = agent(k, code, timeout=300)
    assert e.type == "tool_call_completed"
    text = json.dumps(e.payload.result)
    assert len(text) <= 50_000 and "shown" in text
    assert (k.folder / "test.nbagent").exists()
    # the whole log stays small: the image is described, not stored
    assert sum(p.stat().st_size for p in (k.folder / "test.nbagent").rglob("*") if p.is_file()) < 5_000_000
    alive(k)


def test_megabytes_of_prints_are_bounded(k: Kernel) -> None:
    (e,) = agent(k, "import sys\nfor i in range(40):\n    sys.stdout.write('x' * 100_000 + '\\n')\nprint('end')")
    r = e.payload.result
    assert e.type == "tool_call_completed" and len(json.dumps(r)) <= 50_000
    assert r["stdout_truncated"].startswith("4,000,0")  # the whole length is said
    alive(k)


@pytest.mark.parametrize("code", ["print('started')\nwhile True:\n    pass",
                                  "import asyncio\nprint('started')\nawait asyncio.sleep(3600)"],
                         ids=["synchronous", "awaiting"])
def test_code_that_never_ends_is_stopped_by_the_time_limit_and_the_run_records_it(k: Kernel, code: str) -> None:
    assert k.run("%agent config tool_timeout=3", cell_id="cfg").ok
    (e,) = agent(k, code)
    assert e.type == "tool_call_completed"
    r = e.payload.result
    assert r["interrupted"] and "time limit passed (3 s" in r["error"] and r["stdout"] == "started\n"
    alive(k)
    # the handler the kernel had is back: a person's interrupt still reaches their own cell
    probe = k.run("import signal\nprint(signal.getsignal(signal.SIGINT).__module__)", cell_id="sig")
    assert "nbagent" not in probe.stdout
