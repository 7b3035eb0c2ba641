// ------------------------------------------------------------------------------------------------ the record
//
// The sections of a run below its plans (effects, banners, head, pending, timeline, answer, errors, totals) and
// `renderView`, the static record the lab extension draws. The words they show come from the view (`said`).
//
// What the run did to the folder and what it was refused, from the log (`view.effects`, nbagent/ui/effects_summary.py,
// which words the text/html record the same way): beside the answer, which is the model's own account and may claim
// what did not happen. And whether an undo put the run's changes back (`undone_by`, `undo_history`).

import { STATUS_ICON, STATUS_TONE, said, totalsEl, h, byWhom, shortId, plural, clip, totalsLine, treeLine, badge } from "./format.js";
import { markdown } from "./markdown.js";
import { HEAD_STEPS, TAIL_STEPS, MAX_STEPS_SHOWN, details, stepEl } from "./timeline.js";
import { upperFirst, planSummary, planEl, bannerEl } from "./plans.js";
import { compactEl, isCompact } from "./summary.js";

export const fileCount = (fx) => ["created", "changed", "deleted"].reduce((n, k) => n + ((fx || {})[k] || []).length, 0);

export function showsEffects(view) {
  const fx = view.effects;
  if (!fx || typeof fx !== "object") return false;
  const ended = !["running", "waiting"].includes(String(view.status || "running"));
  return ended || !!(fileCount(fx) || (fx.refused || []).length || (fx.other || []).length || (fx.cells || []).length);
}

// "create_file report.md: plan denied by you: not today"
export function refusalLine(r) {
  const what = `${r.tool || "a call"}${r.target ? ` ${r.target}` : ""}`;
  const why = String(r.why || "").trim();
  if (r.kind === "plan") {
    const by = why.toLowerCase().startsWith("denied") ? "" : `plan denied by ${r.by ? byWhom(r.by) : "someone"}`;
    return `${what}: ${[by, why].filter(Boolean).join(": ")}`;
  }
  return why ? `${what}: denied (${r.by}): ${why}` : `${what}: denied (${r.by})`;
}

export const VERB_TONE = { created: "ok", changed: "warn", deleted: "bad" };
export const CELL_TONE = { added: "ok", replaced: "warn", removed: "bad", restored: "warn" };
// (as nbagent/ui/effects_summary.py cells_note)
const CELLS_NOTE = "what these cells' code did (variables, files it wrote) is not tracked here, nor undone by an undo";

export function effectsEl(view) {
  if (!showsEffects(view)) return "";
  const fx = view.effects;
  const items = [];
  for (const verb of ["created", "changed", "deleted"]) {
    for (const path of fx[verb] || []) {
      items.push(h("li", {}, h("span", { class: `nbv-verb nbv-${VERB_TONE[verb]}`, text: verb }), " ", h("code", { text: path })));
    }
  }
  // the notebook cells it wrote (or an undo acted on), named as the person finds them: "[4] df = load()"
  const cells = (fx.cells || []).filter((c) => c && typeof c === "object");
  for (const c of cells) {
    items.push(h("li", { "data-cell-id": c.cell_id || null }, h("span", { class: `nbv-verb nbv-${CELL_TONE[c.verb] || "dim"}`, text: c.verb }),
      " ", h("code", { text: c.name })));
  }
  if (cells.some((c) => c.verb === "added" || c.verb === "replaced")) {
    items.push(h("li", { class: "nbv-dim", text: CELLS_NOTE }));
  }
  for (const r of fx.refused || []) {
    items.push(h("li", { class: "nbv-bad" }, h("span", { class: "nbv-verb", text: "⊘ not done" }), ` ${refusalLine(r)}`));
  }
  const other = [...new Set((fx.other || []).map((o) => String(o.tool)))];
  if (other.length) items.push(h("li", { class: "nbv-dim", text: `also ran ${other.join(", ")}: effects not tracked file by file` }));
  const undone = !view.undone_by ? "" : fileCount(fx) ? ` — put back since by undo run ${view.undone_by}`
    : cells.length ? ` — undone since by undo run ${view.undone_by}` : "";
  return h("div", { class: "nbv-effects-box" }, h("div", { class: "nbv-section", text: `Effects${undone}` }),
    h("div", { class: "nbv-effects", role: "note", "data-files": fileCount(fx), "data-cells": cells.length, "data-refused": (fx.refused || []).length },
      items.length ? h("ul", {}, items) : h("p", { class: "nbv-dim", text: "No file was created, changed or deleted." })));
}

// "undone by run U: …" (its changes are not in the folder), or undone and brought back: the kernel's words
// (view.words.undo_note, nbagent/ui/effects_summary.py undo_note, which names the cells an undo removed or kept);
// a record saved without them says it as such records always did
export function undoNote(view) {
  const words = view.words && typeof view.words.undo_note === "string" ? view.words.undo_note : null;
  if (words !== null) return [!words ? "" : view.undone_by ? "warn" : "dim", words];
  if (view.undone_by) {
    return ["warn", `undone by run ${view.undone_by}: the files this run changed were put back, so what it says it did is `
      + `no longer in the folder (%agent undo ${view.undone_by} brings the changes back)`];
  }
  const history = (view.undo_history || []).filter((x) => x && typeof x === "object");
  if (history.length) {
    const last = history[history.length - 1];
    return ["dim", `undone by run ${last.run_id}, which run ${last.undone_by} undid: this run's changes are back in the folder`];
  }
  return ["", ""];
}

export function undoBannerEl(view) {
  const [tone, sentence] = undoNote(view);
  if (!sentence) return "";
  const at = sentence.indexOf(": ");
  const head = sentence.slice(0, at);
  return h("div", { class: `nbv-banner nbv-${tone} nbv-undone`, "data-undone-by": view.undone_by || "" },
    h("strong", { text: `↶ ${upperFirst(head)}` }), `: ${sentence.slice(at + 2)}`);
}

// a run that ended with failed or denied calls says so before its answer (as record.py outcome_warning)
function outcomeWarning(view) {
  if (view.status !== "completed_with_errors") return "";
  const t = view.totals || {};
  const failed = Number(t.failed || 0);
  const refused = (view.effects || {}).refused;
  const denied = Array.isArray(refused) ? refused.length : Number(t.denied || 0);
  const stopped = Number(t.interrupted || 0); // cells stopped by an interrupt or their time limit
  const what = [failed ? plural(failed, "tool call failed", "tool calls failed") : "",
    stopped ? plural(stopped, "cell was interrupted", "cells were interrupted") : "",
    denied ? plural(denied, "tool call was denied", "tool calls were denied") : ""].filter(Boolean);
  const head = what.length ? what.join(" and ") : "the run recorded errors";
  return `${upperFirst(head)}: the answer is the model's own account and may describe what did not happen; check Effects and Errors`;
}

export function outcomeWarningEl(view) {
  const text = said(view, "outcome", () => outcomeWarning(view));
  return text ? h("div", { class: "nbv-banner nbv-warn nbv-outcome" }, h("strong", { text: `⚠ ${text}` })) : "";
}

export function headEl(view, status) {
  const meta = [["model", view.model], ["autonomy", view.autonomy], ["run", shortId(view.run_id)]];
  const cell = view.cell_label || (view.cell_id ? String(view.cell_id).slice(0, 8) : "");
  if (cell) meta.push(["cell", cell]);
  const undoes = view.undoes && typeof view.undoes === "object" && view.undoes.run_id ? view.undoes : null;
  if (undoes) meta.push(["undo of run", `${undoes.run_id}${undoes.to ? " and every later run" : ""}`]);
  return h("div", { class: "nbv-head" },
    h("span", { class: `nbv-badge nbv-${STATUS_TONE[status] || "dim"} nbv-status` },
      status === "running" ? h("span", { class: "nbv-pulse", "aria-hidden": "true" }) : `${STATUS_ICON[status] || ""} `,
      status.replace(/_/g, " ")),
    h("span", { class: "nbv-title", text: "nbagent run" }),
    h("span", { class: "nbv-meta" }, meta.filter(([, v]) => v).map(([k, v], j) =>
      h("span", {}, j ? " · " : "", `${k} `, h("code", { text: v, title: k === "run" ? view.run_id : k === "cell" ? view.cell_id : null })))));
}

export const promptEl = (view) => (view.prompt ? h("div", { class: "nbv-prompt", text: view.prompt }) : "");

// the live view: an interrupted run says how to continue it (a waiting one has its decision panel)
export function interruptedEl(view, status) {
  if (status !== "interrupted") return "";
  const rid = shortId(view.run_id);
  return h("div", { class: "nbv-banner nbv-warn" }, h("strong", { text: "■ interrupted" }),
    h("span", { class: "nbv-hint", text: view.pending
      ? `in a new cell: %agent approve ${rid} · %agent deny ${rid} "reason" · %agent refine ${rid} "feedback"`
      : `in a new cell: %agent resume ${rid}` }));
}

// the `%agent` line that answers a waiting run (as nbagent/ui/record.py's pending_hint says it)
export function pendingHint(view) {
  const pending = view.pending || {};
  const rid = shortId(view.run_id);
  if (pending.kind === "approval") {
    return `%agent approve ${rid}  ·  %agent deny ${rid} "reason"  ·  %agent refine ${rid} "feedback"`
      + (view.status === "interrupted" ? `  (then %agent resume ${rid})` : "");
  }
  if (pending.kind === "human_input") return `%agent answer ${rid} "your answer"`;
  return `%agent resume ${rid}`;
}

export function pendingText(view) {
  const pending = view.pending || {};
  if (pending.kind === "approval") {
    const plan = (view.plans || []).find((p) => p.plan_id === pending.plan_id);
    return `waiting for approval of plan ${shortId(pending.plan_id)}${plan ? ` (${clip(planSummary(plan), 80)})` : ""}`;
  }
  if (pending.kind === "human_input") return `waiting for an answer to: ${clip(pending.question || "", 200)}`;
  return "waiting";
}

// the static record: a waiting or interrupted run says which `%agent` line continues it
export function staticPendingEl(view, status) {
  if (view.superseded_by || status === "superseded") return "";
  if (!view.pending && status !== "interrupted" && status !== "waiting") return "";
  const title = view.pending ? `‖ ${said(view, "pending", () => pendingText(view))}` : `■ ${status}`;
  return h("div", { class: "nbv-banner nbv-warn nbv-pending" }, h("strong", { text: title }),
    h("span", { class: "nbv-hint", text: `in a new cell: ${said(view, "pending_hint", () => pendingHint(view))}` }));
}

export function stepsOl(ctx, steps, start, decisions) {
  const ol = h("ol", { class: "nbv-steps" }, steps.map((s, k) => stepEl(ctx, s, start + k, decisions)));
  if (start !== 1) ol.setAttribute("start", String(start));
  return ol;
}

// the timeline counts its entries (model replies, tool calls, decisions…), not "steps": the totals count tool calls
export const timelineLabel = (steps) => `Timeline · ${plural(steps.length, "entry", "entries")}`;

export const decisionsByRequest = (view) =>
  new Map((view.decisions || []).filter((d) => d.request_id).map((d) => [d.request_id, d]));

// a static timeline: a long one shows its first and last steps, the middle ones collapsed
export function staticStepsEl(ctx, view) {
  const steps = view.steps || [];
  if (!steps.length) return "";
  const decisions = decisionsByRequest(view);
  const out = [h("div", { class: "nbv-section", text: said(view, "timeline", () => timelineLabel(steps)) })];
  if (steps.length <= MAX_STEPS_SHOWN) {
    out.push(stepsOl(ctx, steps, 1, decisions));
  } else {
    const middle = steps.slice(HEAD_STEPS, steps.length - TAIL_STEPS);
    out.push(stepsOl(ctx, steps.slice(0, HEAD_STEPS), 1, decisions),
      details(ctx, "steps:middle", `… ${middle.length} more steps`, stepsOl(ctx, middle, HEAD_STEPS + 1, decisions)),
      stepsOl(ctx, steps.slice(steps.length - TAIL_STEPS), steps.length - TAIL_STEPS + 1, decisions));
  }
  return h("div", { class: "nbv-timeline" }, out);
}

// `controls`: the live view's decision panel, placed in the card of the plan it decides
export function plansEl(ctx, view, controls) {
  const plans = view.plans || [];
  const pending = view.pending || {};
  // a sub-agent's plan waits in this view too: its card comes from the pending request (nbagent/ipython/live.py)
  const foreign = pending.kind === "approval" && pending.plan && !plans.some((p) => p.plan_id === pending.plan_id)
    ? pending.plan : null;
  if (!plans.length && !foreign && !(controls && pending.kind === "approval")) return "";
  const out = [h("div", { class: "nbv-section", text: `Plans (${plans.length})` })];
  out.push(...plans.map((p, k) => planEl(ctx, p, k + 1, view, controls)));
  if (foreign) out.push(planEl(ctx, { ...foreign, plan_id: pending.plan_id, status: "proposed" }, 0, view, controls));
  else if (controls && pending.kind === "approval" && !plans.some((p) => p.plan_id === pending.plan_id)) {
    out.push(h("div", { class: "nbv-plan nbv-plan-waiting nbv-plan-high" }, controls));
  }
  return h("div", {}, out);
}

export function answerEl(view) {
  if (!view.answer) return "";
  return h("div", { class: "nbv-answer" }, h("div", { class: "nbv-section", text: "Answer" }),
    markdown(view.answer, h("div", { class: "nbv-md" })));
}

export function errorsEl(view) {
  const errors = (view.errors || []).filter(Boolean);
  if (view.error && !errors.includes(view.error)) errors.unshift(view.error);
  if (!errors.length) return "";
  return h("div", {}, h("div", { class: "nbv-section", text: "Errors" }),
    h("ul", { class: "nbv-errors" }, errors.map((e) => h("li", { text: e }))));
}

export function footEl(view, withRunId) {
  const tree = said(view, "tree", () => treeLine(view.tree, !!view.cost_nominal));
  return h("div", { class: "nbv-foot" },
    h("span", {}, h("strong", { text: "Totals " }), view.words && typeof view.words.totals === "string"
      ? totalsEl(view.words.totals, !!view.cost_nominal) : totalsLine(view.totals, !!view.cost_nominal)),
    tree ? h("span", { class: "nbv-tree" }, h("strong", { text: "Run tree " }), tree) : "",
    withRunId && view.run_id ? h("span", {}, h("strong", { text: "Run " }), h("code", { class: "nbv-run-id", text: view.run_id })) : "",
    view.log_path ? h("span", {}, h("strong", { text: "Log " }), h("code", { class: "nbv-log", text: view.log_path })) : "");
}

// a run that ended having changed files: how to undo it (as nbagent/ui/record.py undo_hint says it)
export const FILE_CHANGE_TOOLS = new Set(["create_file", "write_file", "delete_file"]);
export function undoHint(view) {
  const status = String(view.status || "running");
  // undone already: its changes are not in the folder to undo (as nbagent/ui/record.py undo_hint)
  if (["running", "waiting"].includes(status) || !view.run_id || view.undone_by) return "";
  const paths = new Set((view.steps || [])
    .filter((s) => s.kind === "tool" && FILE_CHANGE_TOOLS.has(s.tool) && s.status === "ok")
    .map((s) => String(s.target || (s.arguments || {}).path || s.call_id)));
  const n = paths.size;
  // cells it wrote (its Effects list them): as the kernel's Undo… offer words it (nbagent/ipython/undo_offers.py)
  const cells = ((view.effects || {}).cells || []).filter((c) => c && (c.verb === "added" || c.verb === "replaced"));
  if (cells.length) {
    const what = [n ? plural(n, "file", "files") : "", plural(cells.length, "cell", "cells")].filter(Boolean);
    return `%agent undo ${view.run_id} undoes this run's changes (${what.join(", ")})`;
  }
  if (!n) return "";
  return `%agent undo ${view.run_id} undoes this run's ${n} file ${n === 1 ? "change" : "changes"}`;
}

export function undoHintEl(view) {
  const hint = said(view, "undo_hint", () => undoHint(view));
  if (!hint) return "";
  const [command, rest] = hint.split(" undoes ");
  return h("p", { class: "nbv-undo-hint" }, h("strong", {}, "↶ Undo "), h("code", { text: command }), ` undoes ${rest}`);
}

// a reproduced run: which recorded run it replayed from the log (as nbagent/ui/record_words.py reproduced_line says)
export const reproducedLine = (view) => (view.reproduces
  ? `reproduced run ${shortId(view.reproduces)} from the log: no model call, the recorded decisions` : "");

export function reproducedEl(view) {
  const line = said(view, "reproduced", () => reproducedLine(view));
  return line ? h("p", { class: "nbv-reproduced" }, h("strong", { text: "↻ " }), upperFirst(line)) : "";
}

/**
 * Draw a run's static record (no buttons, no kernel needed) into `el`; returns the root element.
 * `options.open`: a Map of <details> open states by key, kept across re-renders.
 */
export function renderView(el, view, options = {}) {
  view = view && typeof view === "object" ? view : {};
  const ctx = { open: options.open || new Map(), static: true, nominal: !!view.cost_nominal };
  const status = String(view.status || "running");
  const sections = () => [headEl(view, status), promptEl(view),
    staticPendingEl(view, status), outcomeWarningEl(view), staticStepsEl(ctx, view), plansEl(ctx, view),
    effectsEl(view), answerEl(view), errorsEl(view)];
  // what became of the run (reproduced, superseded, undone) is in sight, folded or not (as record_html.py)
  const fate = () => [reproducedEl(view), bannerEl(view), undoBannerEl(view)];
  // a finished run folds to two lines (summary.js); its ↶ Undo line stays in sight below them
  const parts = isCompact(view)
    ? [...fate(), compactEl(ctx, view, said(view, "outcome", () => outcomeWarning(view)), [...sections(), footEl(view, true)]),
      undoHintEl(view)]
    : [...fate(), ...sections(), undoHintEl(view), footEl(view, true)];
  const root = h("div", { class: `nbagent-live nbv-static nbv-status-${status}`, "data-run-id": view.run_id || null },
    parts);
  el.appendChild(root);
  return root;
}
