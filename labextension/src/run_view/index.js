// The view of an nbagent run: the live anywidget view (default export), and `renderRecord`, which shows a run's
// record (the kernel's HTML, nbagent/ui/record_html.py) safely in the JupyterLab extension. Plain DOM, no framework.
//
// These ES modules are the source; `npm run build:view` (labextension/build-view.mjs, esbuild) bundles them, with
// markdown-it and DOMPurify, into the one file nbagent/ui/run_view.js, which is committed: the Python package
// serves it as the widget's ESM (nbagent/ui/widget.py) and the lab extension imports it (src/view.ts), so neither a
// wheel built from the sdist nor `pip install` on a machine without npm needs this build. A test
// (labextension/test/bundle.test.ts) fails when the committed file is not what the build makes of these sources.
//
//   format.js    the DOM builder `h` and the formatters (numbers, times, costs, arguments, badges, diffs)
//   markdown.js  the model's answer: markdown-it, then DOMPurify (the rules of the record's markdown_html)
//   timeline.js  one step of the timeline
//   plans.js     a plan: what it asks, in words made from its steps, never the model's
//   record.js    the sections of a run the live view draws
//   saved.js     `renderRecord`: the record's HTML through DOMPurify with the record's allow-list
//   live.js      the live widget: decisions, the streamed reply, focus
//   undo.js      the `%agent undo` panel
//
// Model traits (all set by the kernel, none by this view): `view` (the view-state dict, see
// nbagent/ui/viewstate.py), `streaming` (the reply being streamed), `decided` (the request id Python accepted a
// decision for), `ended` (set once, when the kernel is done with this view: the record's MIME bundle). A click goes
// to the kernel as a custom message, `model.send({event: "decision", request_id,
// action: "approve"|"deny"|"refine"|"answer", text, nonce})`; `{event: "rendered"}` says the view is drawn.
//
// Every string from the model, a tool or a person is untrusted: it reaches the page as a text node (textContent),
// but for the answer's Markdown, which markdown-it renders with raw HTML off and DOMPurify sanitises (links:
// http, https and mailto only).

import { FINAL_EVENT, render } from "./live.js";
import { approvalQuestion, approveLabel, denyLabel, planSummary } from "./plans.js";
import { refusalLine } from "./record.js";
import { recordFragment, renderRecord } from "./saved.js";
import { renderUndo } from "./undo.js";

function renderAny(args) {
  const offer = args.model.get("offer");
  return offer && typeof offer === "object" && offer.run_id ? renderUndo(args) : render(args);
}

export { approvalQuestion, approveLabel, denyLabel, FINAL_EVENT, planSummary, recordFragment, refusalLine,
  renderRecord };
export default { render: renderAny };
