// ------------------------------------------------------------------------------------------------ the compact record
//
// A finished run's static record folds to two lines (nbagent/ui/record_summary.py words them: `view.words.summary`,
// `summary_more`, `compact`): the status and the request's first line; the answer's first line (or what went
// wrong), the counts and the cost. The whole record is behind them, in a <details> (Enter or Space on the summary
// opens it). A run that waits, failed, was interrupted or still runs is never folded. Whether a record is open is
// kept by run id for the page's lifetime: the lab extension replaces a record's output when the run's state changes
// (labextension/src/records.ts), and the new renderer opens it as the person left it.

import { STATUS_ICON, STATUS_TONE, h, said, plural, clip, fmtCost, shortId } from "./format.js";

export const COMPACT = ["completed", "completed_with_errors", "superseded"];
const CELL_TOOLS = ["run_cell", "replace_cell"];
const MARKS = /^[#>*\-+`\s]+/;

// run id -> open: the person's choice, for every record of that run on the page
export const RECORD_OPEN = new Map();

const statusOf = (view) => (view.superseded_by ? "superseded" : String(view.status || "running"));
const answerable = (view) => !!view.pending && !view.superseded_by && view.status !== "superseded";

/** Whether the record folds to its summary (as record_summary.compact). */
export function isCompact(view) {
  const w = view && view.words;
  if (w && typeof w.compact === "boolean") return w.compact;
  return COMPACT.includes(statusOf(view)) && !answerable(view);
}

function firstLine(text, width) {
  for (const line of String(text || "").split(/\r?\n/)) {
    const words = line.trim().replace(MARKS, "").replace(/\*\*|__|`/g, "").trim();
    if (words) return clip(words, width);
  }
  return "";
}

export function cellsChanged(view) {
  const cells = new Set();
  for (const s of view.steps || []) {
    if (s.kind !== "tool" || !CELL_TOOLS.includes(s.tool) || s.status !== "ok") continue;
    const c = s.cell && typeof s.cell === "object" ? s.cell : {};
    cells.add(String(c.cell_id || s.call_id || s.id));
  }
  return cells.size;
}

export function changedWords(view) {
  const fx = view.effects && typeof view.effects === "object" ? view.effects : {};
  const files = ["created", "changed", "deleted"].reduce((n, k) => n + (fx[k] || []).length, 0);
  const parts = [[cellsChanged(view), "cell", "cells"], [files, "file", "files"]]
    .filter(([n]) => n).map(([n, one, many]) => plural(n, one, many));
  return parts.length ? `${parts.join(" and ")} changed` : "no cell or file changed";
}

/** Line one: "✓ completed · the request's first line". */
export function summaryHead(view) {
  const status = statusOf(view);
  const request = firstLine(view.prompt, 100);
  const head = `${STATUS_ICON[status] || ""} ${status.replace(/_/g, " ")}`.trim();
  return request ? `${head} · ${request}` : head;
}

/** Line two: the answer's first line (or what went wrong, an undo), the counts, the cost; `outcome`: the warning. */
export function summaryTail(view, outcome) {
  const out = [];
  if (view.superseded_by) out.push(`superseded by run ${shortId(view.superseded_by)}`);
  if (outcome) out.push(`⚠ ${String(outcome).split(":")[0]}`);
  if (view.undone_by) out.push(`undone by run ${shortId(view.undone_by)}`);
  out.push(firstLine(view.answer, 120) || "no answer");
  const t = view.totals || {};
  out.push(plural(Number(t.tool_calls ?? t.steps ?? 0), "tool call", "tool calls"), changedWords(view),
    fmtCost(t.cost, !!view.cost_nominal));
  return out.join(" · ");
}

/** The folded record: `body` (every section) behind the two lines. */
export function compactEl(ctx, view, outcome, body) {
  const head = said(view, "summary", () => summaryHead(view));
  const more = said(view, "summary_more", () => summaryTail(view, outcome));
  const at = head.indexOf(" · ");
  const state = at < 0 ? head : head.slice(0, at);
  const status = statusOf(view);
  const key = view.run_id ? String(view.run_id) : "";
  const summary = h("summary", { class: "nbv-summary-line", title: "show the whole record (Enter)" },
    h("span", { class: `nbv-summary-state nbv-${STATUS_TONE[status] || "dim"}`, text: state }),
    at < 0 ? "" : h("span", { class: "nbv-summary-request", text: head.slice(at) }),
    h("span", { class: "nbv-summary-more", text: more }));
  const d = h("details", { class: "nbv-compact" }, summary, h("div", { class: "nbv-record-body" }, body));
  d.open = key && RECORD_OPEN.has(key) ? RECORD_OPEN.get(key) : !!ctx.open.get("record");
  d.addEventListener("toggle", () => {
    ctx.open.set("record", d.open);
    if (key) RECORD_OPEN.set(key, d.open);
  });
  return d;
}
