// ------------------------------------------------------------------------------------------------ plans
//
// What a plan asks is phrased here from its steps (tool, target, risk, risk_reason), never from the model's
// words: the model's purpose is shown as a quote. A plan with a WRITE_HIGH_RISK step gets a card that looks
// and reads differently (danger styling, what makes it high risk, an Approve button that names the action), so
// a delete is never approved with the reflex of a create.

import { PLAN_STATUS, PLAN_TONE, DECISION_VERB, DIFF_OPEN_LINES, h, fmtTime, byWhom, fmtTs, clip, formatArgs, argsJson, argsClipped, badge, riskBadge, looksLikeDiff, diffPre } from "./format.js";
import { details, textBlock } from "./timeline.js";

export const HIGH = "WRITE_HIGH_RISK";
export const FILE_VERB = { delete_file: "delete", write_file: "overwrite", create_file: "create", read_file: "read" };
export const HIGH_NOUN = { delete_file: ["delete", "deletes"], write_file: ["overwrite", "overwrites"],
  run_python: ["code run", "code runs"] };
// the agent's notebook cells, worded as nbagent/ui/record_words.py words them ({} is the cell the call names)
export const CELL_ACTION = { run_cell: "run a cell", replace_cell: "replace cell {} and run it",
  insert_code_cell: "insert a cell" };
export const CELL_EFFECT = { run_cell: "runs a new cell in the kernel, with everything the notebook can reach",
  replace_cell: "replaces the code of cell {} (diff below) and runs it in the kernel, with everything the notebook "
    + "can reach",
  insert_code_cell: "inserts a cell of code that Run All (and `nbagent run`, once approved) runs" };

export const upperFirst = (t) => (t ? t[0].toUpperCase() + t.slice(1) : t);

export function stepTarget(s) {
  if (s.target) return String(s.target);
  const a = s.arguments && typeof s.arguments === "object" ? s.arguments : {};
  return typeof a.path === "string" ? a.path : "";
}

// The agent's cell named as the page shows it (nbagent/ui/cell_names.py puts `cell` on the step): "[3] df = …",
// "new cell below [4]: import pandas as pd"; "" when the log and the kernel know no such cell (then its spelling).
export function cellName(s) {
  const c = s && s.cell && typeof s.cell === "object" ? s.cell : null;
  if (!c) return "";
  const line = String(c.first_line || "");
  if (c.new) {
    const where = Number.isInteger(c.below) ? `new cell below [${c.below}]` : "new cell below the request";
    return line ? `${where}: ${line}` : where;
  }
  const label = Number.isInteger(c.count) ? `[${c.count}]` : "cell";
  return line || label !== "cell" ? `${label} ${line}`.trim() : "";
}

// "[3]" for a sentence ("replace cell [3] and run it"), "" when its execution count is unknown
export const cellShort = (s) => (s && s.cell && !s.cell.new && Number.isInteger(s.cell.count) ? `[${s.cell.count}]` : "");

// the ids behind the name, for its tooltip: "cell 3f2a… (the model wrote nb1_0)"
export function cellTitle(s) {
  const c = s && s.cell && typeof s.cell === "object" ? s.cell : null;
  if (!c || c.new) return c && c.cell_id ? `cell ${c.cell_id}` : null;
  const spelled = String((s.arguments && s.arguments.cell) || s.target || "");
  return `cell ${c.cell_id || "?"}${spelled && spelled !== c.cell_id ? ` (the model wrote ${spelled})` : ""}`;
}

// a write_file step whose file did not exist when it was planned: a create (nbagent/tools/files.py), said as one
// (as nbagent/ui/record_words.py creates)
export function creates(s) {
  const targets = (s && s.effect && Array.isArray(s.effect.targets)) ? s.effect.targets : [];
  return s.tool === "write_file" && targets.length > 0 && targets.every((t) => t && t.op === "create");
}

// "delete data.txt", "overwrite report.md", "create notes.md", "run code", "run my_tool"
export function stepAction(s) {
  const verb = creates(s) ? "create" : FILE_VERB[s.tool];
  if (verb) return `${verb} ${clip(stepTarget(s) || "a file", 60)}`;
  const cell = CELL_ACTION[s.tool];
  if (cell) return cell.replace("{}", cellShort(s) || clip(stepTarget(s) || "a cell", 40));
  if (s.tool === "run_python") return "run code";
  return `run ${s.tool || "a tool"}`;
}

// what one step does, said plainly (for the high-risk line): "deletes data.txt", "runs Python code in the kernel"
export function stepEffect(s) {
  const t = clip(stepTarget(s) || "a file", 80);
  const effect = { delete_file: `deletes ${t}`, write_file: creates(s) ? `creates ${t}` : `replaces the contents of ${t}`,
    create_file: `creates ${t}` }[s.tool]
    || (CELL_EFFECT[s.tool] ? CELL_EFFECT[s.tool].replace("{}", cellShort(s) || clip(stepTarget(s) || "a cell", 40))
      : undefined)
    || (s.tool === "run_python" ? "runs Python code in the kernel, with everything the notebook can reach"
      : `runs ${s.tool || "a tool"}${s.target ? ` on ${clip(s.target, 60)}` : ""}, a tool marked high risk`);
  return s.risk_reason ? `${effect}: ${s.risk_reason}` : effect;
}

export const isHighRisk = (plan) => (plan.steps || []).some((s) => s.risk === HIGH) || plan.max_risk === HIGH;

/** The Approve button's text: the action for one step, the count (and what is high risk) for several. */
export function approveLabel(plan) {
  const steps = (plan && plan.steps) || [];
  if (steps.length === 1) return upperFirst(stepAction(steps[0]));
  if (!steps.length) return "Approve";
  const counts = new Map();
  for (const s of steps) {
    if (s.risk !== HIGH) continue;
    const noun = (creates(s) ? ["create", "creates"] : HIGH_NOUN[s.tool]) || ["high-risk step", "high-risk steps"];
    counts.set(noun, (counts.get(noun) || 0) + 1);
  }
  const high = [...counts].map(([[one, many], n]) => `${n} ${n === 1 ? one : many}`);
  return `Approve ${steps.length} actions${high.length ? ` (${high.join(", ")})` : ""}`;
}

/** What the plan does, in nbagent's words: "delete data.txt"; "3 steps: create a.md, delete b.md, run code" (as the record words it). */
export function planSummary(plan) {
  const steps = (plan && plan.steps) || [];
  if (!steps.length) return "no steps";
  if (steps.length === 1) return stepAction(steps[0]);
  const shown = steps.slice(0, 3).map(stepAction);
  return `${steps.length} steps: ${shown.join(", ")}${steps.length > 3 ? `, and ${steps.length - 3} more` : ""}`;
}

/**
 * The approval question, phrased from the plan's steps (what will happen, to what), never from the model's words:
 * "Delete data.txt?", "Delete old.txt and overwrite report.md?", "Run these 3 actions?" (the card lists them).
 */
// a plan's summary as the record words it (view.words.plans), or, in a view saved before views carried it, made here
export function summaryOf(view, plan) {
  const words = (view && view.words && view.words.plans) || {};
  return typeof words[plan.plan_id] === "string" ? words[plan.plan_id] : planSummary(plan);
}

export function approvalQuestion(plan) {
  const steps = (plan && plan.steps) || [];
  if (!steps.length) return "Approve this plan?";
  if (steps.length <= 2) return `${upperFirst(steps.map(stepAction).join(" and "))}?`;
  return `Run these ${steps.length} actions?`;
}

/** The button that confirms a denial says what it denies: "Deny: delete data.txt", "Deny these 3 actions". */
export function denyLabel(plan) {
  const steps = (plan && plan.steps) || [];
  if (steps.length === 1) return `Deny: ${stepAction(steps[0])}`;
  return steps.length ? `Deny these ${steps.length} actions` : "Deny the plan";
}

// the line that says what makes a plan high risk (its WRITE_HIGH_RISK steps, with any risk_reason); `asking`:
// the plan still waits for a person
export function dangerEl(plan, asking) {
  const effects = (plan.steps || []).filter((s) => s.risk === HIGH).map(stepEffect);
  const head = h("strong", { class: "nbv-danger-title", text: "⚠ High risk" });
  const check = asking ? (effects.length > 1 ? " Check each step before you approve." : " Check it before you approve.") : "";
  if (effects.length <= 1) {
    return h("div", { class: "nbv-danger", role: "note" }, head,
      ` — this plan ${effects[0] || "includes a step marked high risk"}.${check}`);
  }
  return h("div", { class: "nbv-danger", role: "note" }, head, " — this plan:",
    h("ul", {}, effects.map((e) => h("li", { text: e }))), check.trim());
}

export const NOT_ASKED = "not asked: a grant or the autonomy answers it, not this decision";

// the runtime's stand-in purpose when the model wrote nothing ("2 tool call(s): a, b"): not the model's words
export const NO_NOTE = /^\d+ tool call\(s\): [\w.:-]+(, [\w.:-]+)*$/;

// the model's own words about the plan: shown, but as a quote, never as the question
export function purposeEl(plan) {
  if (!plan.purpose || NO_NOTE.test(plan.purpose)) return "";
  return h("div", { class: "nbv-purpose" }, h("span", { class: "nbv-purpose-by", text: "the model says " }),
    h("q", { text: plan.purpose }));
}

export function planEl(ctx, plan, index, view, controls) {
  const pending = view.pending || {};
  const waiting = pending.kind === "approval" && pending.plan_id === plan.plan_id;
  const status = plan.status || "proposed";
  const high = isHighRisk(plan);
  const card = h("div", { class: `nbv-plan${waiting ? " nbv-plan-waiting" : ""}${high ? " nbv-plan-high" : ""}`,
    "data-plan-id": plan.plan_id || null },
    h("div", { class: "nbv-plan-head" },
      h("strong", { class: "nbv-plan-title", text: `${index ? `Plan ${index}: ` : "Plan: "}${upperFirst(summaryOf(view, plan))}` }),
      badge(waiting ? "waiting for approval" : PLAN_STATUS[status] || status, waiting ? "warn" : PLAN_TONE[status] || "dim"),
      h("span", { class: "nbv-facts" }, "max risk"), riskBadge(plan.max_risk) || ""),
    purposeEl(plan), high ? dangerEl(plan, waiting) : "");
  const steps = plan.steps || [];
  if (steps.length) {
    card.appendChild(h("table", {},
      h("thead", {}, h("tr", {}, ["#", "tool", "target", "risk", "arguments"].map((t) => h("th", { text: t })))),
      h("tbody", {}, steps.map((s, k) => h("tr", { class: s.risk === HIGH ? "nbv-row-high" : null },
        h("td", { text: k + 1 }), h("td", {}, h("span", { class: "nbv-tool", text: s.tool })),
        h("td", {}, cellName(s) ? h("code", { class: "nbv-cell-name", text: cellName(s), title: cellTitle(s) })
          : s.target ? h("code", { text: s.target }) : ""),
        h("td", {}, riskBadge(s.risk) || "", s.risk_reason ? h("div", { class: "nbv-risk-reason", text: s.risk_reason }) : "",
          // a call a grant (a yes, or a standing no) or the autonomy answered: this decision is not about it
          s.asks === false ? h("div", { class: "nbv-not-asked", text: NOT_ASKED }) : ""),
        h("td", { class: "nbv-args-cell" }, h("span", { class: "nbv-args", text: formatArgs(s.arguments, 48, s.arg_keys) }),
          argsClipped(s.arguments, 48)
            ? details(ctx, `pargs:${plan.plan_id}:${k}`, "all arguments", h("pre", { text: argsJson(s.arguments, s.arg_keys) }))
            : ""))))));
    for (const s of steps) {
      const diff = s.diff || s.preview;
      if (!diff) continue;
      const key = `diff:${plan.plan_id}:${s.call_id}`;
      if (s.diff || looksLikeDiff(String(diff))) {
        const lines = String(diff).replace(/\n$/, "").split("\n");
        const adds = lines.filter((l) => l.startsWith("+") && !l.startsWith("+++")).length;
        const dels = lines.filter((l) => l.startsWith("-") && !l.startsWith("---")).length;
        const summary = h("span", {}, "diff of ", h("code", { text: s.target || s.tool }),
          `: +${adds} -${dels}${lines.length > DIFF_OPEN_LINES ? ` (${lines.length} lines)` : ""}`);
        // a live card opens the diff it asks about
        const open = waiting && lines.length <= DIFF_OPEN_LINES;
        card.appendChild(details(ctx, key, summary, diffPre(diff), open));
      } else {
        card.appendChild(textBlock(ctx, key, diff, `preview of ${s.tool}`));
      }
    }
  }
  if (waiting && controls) card.appendChild(controls);
  const decisions = (view.decisions || []).filter((d) => d.plan_id && d.plan_id === plan.plan_id);
  if (decisions.length) {
    card.appendChild(h("ul", { class: "nbv-decisions" }, decisions.map((d) => {
      const label = { rejected: "reason", refined: "feedback", answered: "answer" }[d.kind] || "note";
      const when = fmtTime(d.ts);
      return h("li", { title: d.ts ? fmtTs(d.ts) : null },
        h("span", { class: `nbv-${PLAN_TONE[d.kind] || "dim"}`, text: DECISION_VERB[d.kind] || d.kind }),
        ` by ${byWhom(d.by)}${when ? ` · ${when}` : ""}${d.text ? ` — ${label}: ${d.text}` : ""}`,
        ...(d.grants || []).map((g) => h("div", { class: "nbv-facts nbv-grant-given",
          text: `and for ${g.scope === "run" ? "the rest of this run" : "this session"}: ${g.covers} (grant ${g.grant_id})` })));
    })));
  } else if (plan.auto_executing) {
    card.appendChild(h("div", { class: "nbv-facts", text: "ran without asking: within the autonomy level" }));
  }
  return card;
}

export function bannerEl(view) {
  if (!view.superseded_by) return "";
  return h("div", { class: "nbv-banner nbv-dim nbv-superseded" }, h("strong", { text: "↷ Superseded" }),
    " by run ", h("code", { text: view.superseded_by }), ": an earlier cell was re-run.");
}
