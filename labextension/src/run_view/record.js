// ------------------------------------------------------------------------------------------------ the record
//
// The sections of the live view of a run (effects, head, timeline, plans, answer, errors, totals). The words they
// show come from the view (`said`). A run's record, once it ended, is the kernel's HTML (saved.js).
//
// What the run did to the folder and what it was refused, from the log (`view.effects`, nbagent/ui/effects_summary.py,
// which words the text/html record the same way): beside the answer, which is the model's own account and may claim
// what did not happen. And whether an undo put the run's changes back (`undone_by`, `undo_history`).

import { STATUS_ICON, STATUS_TONE, said, totalsEl, h, byWhom, shortId, plural, totalsLine, treeLine, badge } from "./format.js";
import { markdown } from "./markdown.js";
import { stepEl } from "./timeline.js";
import { planEl } from "./plans.js";

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

export function stepsOl(ctx, steps, start, decisions) {
  const ol = h("ol", { class: "nbv-steps" }, steps.map((s, k) => stepEl(ctx, s, start + k, decisions)));
  if (start !== 1) ol.setAttribute("start", String(start));
  return ol;
}

// the timeline counts its entries (model replies, tool calls, decisions…), not "steps": the totals count tool calls
export const timelineLabel = (steps) => `Timeline · ${plural(steps.length, "entry", "entries")}`;

export const decisionsByRequest = (view) =>
  new Map((view.decisions || []).filter((d) => d.request_id).map((d) => [d.request_id, d]));

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

export function footEl(view) {
  const tree = said(view, "tree", () => treeLine(view.tree, !!view.cost_nominal));
  return h("div", { class: "nbv-foot" },
    h("span", {}, h("strong", { text: "Totals " }), view.words && typeof view.words.totals === "string"
      ? totalsEl(view.words.totals, !!view.cost_nominal) : totalsLine(view.totals, !!view.cost_nominal)),
    tree ? h("span", { class: "nbv-tree" }, h("strong", { text: "Run tree " }), tree) : "",
    view.log_path ? h("span", {}, h("strong", { text: "Log " }), h("code", { class: "nbv-log", text: view.log_path })) : "");
}
