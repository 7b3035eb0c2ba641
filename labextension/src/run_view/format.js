// Formatting helpers shared by every part of the run view: the DOM builder `h`, numbers, times, costs, tool
// arguments, badges and diffs. Every string reaches the page as a text node (textContent), never as markup.

export const STATUS_ICON = {
  completed: "✓", completed_with_errors: "⚠", failed: "✗", running: "●", waiting: "‖",
  interrupted: "■", superseded: "↷",
};
export const STATUS_TONE = {
  completed: "ok", completed_with_errors: "warn", failed: "bad", running: "info", waiting: "warn",
  interrupted: "warn", superseded: "dim",
};
export const STEP_ICON = { ok: "✓", failed: "✗", denied: "⊘", running: "…", waiting: "‖", info: "·", interrupted: "■" };
export const STEP_TONE = {
  ok: "ok", failed: "bad", denied: "bad", running: "info", waiting: "warn", info: "dim", interrupted: "warn",
};
export const KIND_LABEL = {
  model: "model", tool: "tool", denied: "denied", thinking: "thinking", question: "question",
  child: "sub-agent", error: "error", info: "info",
};
export const PLAN_STATUS = {
  proposed: "proposed", auto: "ran without asking", approved: "approved", rejected: "denied",
  refined: "sent back to the model",
};
export const PLAN_TONE = { approved: "ok", auto: "ok", rejected: "bad", refined: "warn", proposed: "warn" };
export const DECISION_VERB = { approved: "approved", rejected: "denied", refined: "refined", answered: "answered" };
export const DIFF_OPEN_LINES = 30;
export const LONG_CHARS = 300;
export const LONG_LINES = 6;

// ------------------------------------------------------------------------------------------------ helpers

export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") el.className = v;
    else if (k === "text") el.textContent = String(v);
    else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false || c === "") continue;
    el.appendChild(typeof c === "string" || typeof c === "number" ? document.createTextNode(String(c)) : c);
  }
  return el;
}

// Python's rounding (nbagent/ui/record_words.py formats the same numbers): an exact tie goes to the even digit
// (f"{58.5:.0f}" is "58", round(2.5) is 2), where toFixed and Math.round go up
export function fixed(x, digits) {
  if (!Number.isFinite(x) || x < 0) return x.toFixed(digits);
  const exact = x.toFixed(100); // the double's exact decimal expansion (to 100 places: enough for these numbers)
  const point = exact.indexOf(".");
  const rest = exact.slice(point + 1 + digits);
  if (!/^50*$/.test(rest)) return x.toFixed(digits); // not a tie: toFixed rounds the exact value to nearest
  const down = exact.slice(0, digits ? point + 1 + digits : point);
  return Number(down[down.length - 1]) % 2 === 0 ? down : x.toFixed(digits);
}

export function fmtMs(ms) {
  if (ms === undefined || ms === null) return "";
  ms = Number(ms);
  if (ms < 1) return `${fixed(ms, 2)} ms`;
  if (ms < 10) return `${fixed(ms, 1)} ms`;
  if (ms < 1000) return `${fixed(ms, 0)} ms`;
  const s = ms / 1000;
  if (s < 60) return `${fixed(s, 1)} s`;
  const whole = Number(fixed(s, 0));
  const m = Math.floor(whole / 60);
  if (m < 60) return `${m} min ${whole % 60} s`;
  return `${Math.floor(m / 60)} h ${m % 60} min`;
}

export function fmtCost(c, nominal) {
  if (c === undefined || c === null) return "cost unknown";
  if (nominal) return `${fmtCost(c)} nominal`;
  c = Number(c);
  if (c === 0) return "$0";
  if (c < 0.0001) return `$${c.toExponential(1).replace(/e([+-])(\d)$/, "e$10$2")}`; // Python's 1.0e-05
  if (c < 0.01) return `$${Number(c.toPrecision(2))}`;
  const [whole, cents] = fixed(c, 2).split(".");
  return `$${whole.replace(/\B(?=(\d{3})+$)/g, ",")}.${cents}`; // Python's f"{c:,.2f}"
}

export const fmtTokens = (n) => Number(n || 0).toLocaleString("en-US");

// "14:02" (the full date and time go in a title)
export function fmtTime(ts) {
  const d = new Date(ts || "");
  if (Number.isNaN(d.getTime())) return "";
  return d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
}

// who decided, for a person reading their own notebook: the click in this notebook was "you"
export const byWhom = (by) => (!by || by === "user" ? "you" : by);

export const NOMINAL_TITLE = "The offline scripted model has no real price: its costs are nominal, for testing budgets.";

export function costEl(c, nominal) {
  return nominal && c !== undefined && c !== null
    ? h("span", { class: "nbv-nominal", title: NOMINAL_TITLE, text: fmtCost(c, true) }) : fmtCost(c);
}

export function fmtTs(ts) {
  if (!ts) return "";
  const d = new Date(ts);
  return Number.isNaN(d.getTime()) ? String(ts) : d.toLocaleString();
}

export const shortId = (id) => String(id || "").slice(0, 12);
export const plural = (n, one, many) => `${n} ${n === 1 ? one : many}`;

export function clip(text, n) {
  text = String(text ?? "").split(/\s+/).join(" ").trim();
  return text.length <= n ? text : `${text.slice(0, n - 1)}…`;
}

export function json(v) {
  try {
    return JSON.stringify(v);
  } catch {
    return String(v);
  }
}

// a tool call's arguments in the order the model sent them: a saved notebook stores JSON with sorted keys, so
// the view may carry that order as `arg_keys` (nbagent/ui/record.py shows the dict in its own order)
export function argEntries(args, keys) {
  const entries = Object.entries(args);
  if (!Array.isArray(keys) || !keys.length) return entries;
  const rank = new Map(keys.map((k, i) => [String(k), i]));
  return entries.sort(([a], [b]) => (rank.has(a) ? rank.get(a) : 1e9) - (rank.has(b) ? rank.get(b) : 1e9));
}

export function formatArgs(args, width = 60, keys = null) {
  if (!args || typeof args !== "object" || Array.isArray(args)) return clip(json(args), width);
  return argEntries(args, keys).map(([k, v]) => `${k}=${clip(json(v), width)}`).join(", ");
}

export function argsJson(args, keys) {
  if (!args || typeof args !== "object" || Array.isArray(args)) return JSON.stringify(args, null, 2);
  return JSON.stringify(Object.fromEntries(argEntries(args, keys)), null, 2);
}

export function argsAreLong(args) {
  if (!args || typeof args !== "object") return false;
  return json(args).length > 120 || Object.values(args).some((v) => typeof v === "string" && (v.includes("\n") || v.length > 60));
}

// arguments the one-line form cuts ("…"): their whole text goes behind "all arguments"
export const argsClipped = (args, width) => !!args && typeof args === "object" && !Array.isArray(args)
  && Object.values(args).some((v) => json(v).length > width);

export const isLong = (t) => t.length > LONG_CHARS || t.split("\n").length > LONG_LINES;

// "2 tool calls · 3 model calls · …": tool calls, not "steps", so it never reads against the timeline's entries
// The words and numbers a run shows come from the view (`view.words`, worded by nbagent/ui/record_words.py, the
// same functions the saved record is written with): `said` returns one of them, or, for a view saved before views
// carried them, what `fallback` words the same way (labextension/test/words.test.ts holds both to the record's).
export function said(view, key, fallback) {
  const w = view && view.words;
  return w && typeof w[key] === "string" ? w[key] : fallback();
}

// the totals line with its cost (the fourth part) marked nominal, as costEl
export function totalsEl(text, nominal) {
  const parts = String(text).split(" · ");
  if (!nominal || parts.length < 4) return [String(text)];
  return [parts.slice(0, 3).join(" · "), " · ", h("span", { class: "nbv-nominal", title: NOMINAL_TITLE, text: parts[3] }),
    ...parts.slice(4).map((p) => ` · ${p}`)];
}

export function totalsLine(t, nominal) {
  t = t || {};
  const tools = t.tool_calls ?? t.steps ?? 0;
  const parts = [plural(tools, "tool call", "tool calls"), plural(t.model_calls || 0, "model call", "model calls"),
    `${fmtTokens(t.tokens)} tokens` + (t.prompt_tokens || t.completion_tokens
      ? ` (${fmtTokens(t.prompt_tokens)} in, ${fmtTokens(t.completion_tokens)} out)` : "")];
  const out = [parts.join(" · "), " · ", costEl(t.cost, nominal)];
  if (t.wall_ms !== undefined && t.wall_ms !== null) out.push(` · ${fmtMs(t.wall_ms)}`);
  return out;
}

// what a run and its sub-agents spent together (what budgets count), and each run's share
export function treeLine(tree, nominal) {
  const runs = Object.entries((tree && tree.runs) || {});
  if (runs.length < 2) return "";
  const shares = runs.map(([id, r]) => `${id.slice(-6)}: ${plural(r.model_calls || 0, "call", "calls")} ${fmtCost(r.cost, nominal)}`);
  return `with ${plural(runs.length - 1, "sub-agent", "sub-agents")}: ${plural(tree.model_calls || 0, "model call", "model calls")}` +
    ` · ${fmtTokens(tree.tokens)} tokens · ${fmtCost(tree.cost_known === false ? null : tree.cost, nominal)}` +
    ` · ${plural(tree.tool_steps || 0, "tool call", "tool calls")} (by run: ${shares.join(", ")})`;
}

export function badge(text, tone, title) {
  return h("span", { class: `nbv-badge nbv-${tone}`, title }, text);
}

export function riskBadge(risk) {
  if (!risk) return null;
  const r = String(risk);
  return h("span", { class: `nbv-badge nbv-risk nbv-risk-${r.toLowerCase()}` }, r);
}

export const looksLikeDiff = (t) => /^(--- |diff |@@)/.test(t) || t.includes("\n@@ ");

export function diffPre(diff) {
  const pre = h("pre", { class: "nbv-diff" });
  const lines = String(diff).replace(/\n$/, "").split("\n");
  lines.forEach((line, i) => {
    let cls = "nbv-ctx";
    if (line.startsWith("+++") || line.startsWith("---")) cls = "nbv-fhead";
    else if (line.startsWith("+")) cls = "nbv-add";
    else if (line.startsWith("-")) cls = "nbv-del";
    else if (line.startsWith("@@")) cls = "nbv-hunk";
    pre.appendChild(h("span", { class: cls }, line));
    if (i < lines.length - 1) pre.appendChild(document.createTextNode("\n"));
  });
  return pre;
}
