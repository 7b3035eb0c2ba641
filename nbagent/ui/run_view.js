// The view of an nbagent run: the live anywidget view (default export) and the static record the JupyterLab
// extension draws (`renderView`). Plain DOM, no framework, no build step.
//
// Model traits (all set by the kernel, none by this view): `view` (the view-state dict, see
// nbagent/ui/viewstate.py), `streaming` (the reply being streamed), `decided` (the request id Python accepted a
// decision for), `ended` (set once, when the kernel is done with this view: the record's MIME bundle). A click goes to the kernel as a custom message, `model.send({event: "decision", request_id,
// action: "approve"|"deny"|"refine"|"answer", text, nonce})`; `{event: "rendered"}` says the view is drawn.
//
// Every string from the model, a tool or a person is untrusted: it only ever reaches the page as a text node
// (textContent); the answer's Markdown is built as DOM nodes, links restricted to http(s).

const STATUS_ICON = {
  completed: "✓", completed_with_errors: "⚠", failed: "✗", running: "●", waiting: "‖",
  interrupted: "■", superseded: "↷",
};
const STATUS_TONE = {
  completed: "ok", completed_with_errors: "warn", failed: "bad", running: "info", waiting: "warn",
  interrupted: "warn", superseded: "dim",
};
const STEP_ICON = { ok: "✓", failed: "✗", denied: "⊘", running: "…", waiting: "‖", info: "·" };
const STEP_TONE = { ok: "ok", failed: "bad", denied: "bad", running: "info", waiting: "warn", info: "dim" };
const KIND_LABEL = {
  model: "model", tool: "tool", denied: "denied", thinking: "thinking", question: "question",
  child: "sub-agent", error: "error", info: "info",
};
const PLAN_STATUS = {
  proposed: "proposed", auto: "ran without asking", approved: "approved", rejected: "denied",
  refined: "sent back to the model",
};
const PLAN_TONE = { approved: "ok", auto: "ok", rejected: "bad", refined: "warn", proposed: "warn" };
const DECISION_VERB = { approved: "approved", rejected: "denied", refined: "refined", answered: "answered" };
const DIFF_OPEN_LINES = 30;
const LONG_CHARS = 300;
const LONG_LINES = 6;

// ------------------------------------------------------------------------------------------------ helpers

function h(tag, attrs, ...children) {
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

function fmtMs(ms) {
  if (ms === undefined || ms === null) return "";
  ms = Number(ms);
  if (ms < 1) return `${ms.toFixed(2)} ms`;
  if (ms < 10) return `${ms.toFixed(1)} ms`;
  if (ms < 1000) return `${Math.round(ms)} ms`;
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(1)} s`;
  const m = Math.floor(Math.round(s) / 60);
  if (m < 60) return `${m} min ${Math.round(s) % 60} s`;
  return `${Math.floor(m / 60)} h ${m % 60} min`;
}

function fmtCost(c, nominal) {
  if (c === undefined || c === null) return "cost unknown";
  if (nominal) return `${fmtCost(c)} nominal`;
  c = Number(c);
  if (c === 0) return "$0";
  if (c < 0.0001) return `$${c.toExponential(1)}`;
  if (c < 0.01) return `$${Number(c.toPrecision(2))}`;
  return `$${c.toFixed(2)}`;
}

const fmtTokens = (n) => Number(n || 0).toLocaleString("en-US");

// "14:02" (the full date and time go in a title)
function fmtTime(ts) {
  const d = new Date(ts || "");
  if (Number.isNaN(d.getTime())) return "";
  return d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
}

// who decided, for a person reading their own notebook: the click in this notebook was "you"
const byWhom = (by) => (!by || by === "user" ? "you" : by);

const NOMINAL_TITLE = "The offline scripted model has no real price: its costs are nominal, for testing budgets.";

function costEl(c, nominal) {
  return nominal && c !== undefined && c !== null
    ? h("span", { class: "nbv-nominal", title: NOMINAL_TITLE, text: fmtCost(c, true) }) : fmtCost(c);
}

function fmtTs(ts) {
  if (!ts) return "";
  const d = new Date(ts);
  return Number.isNaN(d.getTime()) ? String(ts) : d.toLocaleString();
}

const shortId = (id) => String(id || "").slice(0, 12);
const plural = (n, one, many) => `${n} ${n === 1 ? one : many}`;

function clip(text, n) {
  text = String(text ?? "").split(/\s+/).join(" ").trim();
  return text.length <= n ? text : `${text.slice(0, n - 1)}…`;
}

function json(v) {
  try {
    return JSON.stringify(v);
  } catch {
    return String(v);
  }
}

// a tool call's arguments in the order the model sent them: a saved notebook stores JSON with sorted keys, so
// the view may carry that order as `arg_keys` (nbagent/ui/record.py shows the dict in its own order)
function argEntries(args, keys) {
  const entries = Object.entries(args);
  if (!Array.isArray(keys) || !keys.length) return entries;
  const rank = new Map(keys.map((k, i) => [String(k), i]));
  return entries.sort(([a], [b]) => (rank.has(a) ? rank.get(a) : 1e9) - (rank.has(b) ? rank.get(b) : 1e9));
}

function formatArgs(args, width = 60, keys = null) {
  if (!args || typeof args !== "object" || Array.isArray(args)) return clip(json(args), width);
  return argEntries(args, keys).map(([k, v]) => `${k}=${clip(json(v), width)}`).join(", ");
}

function argsJson(args, keys) {
  if (!args || typeof args !== "object" || Array.isArray(args)) return JSON.stringify(args, null, 2);
  return JSON.stringify(Object.fromEntries(argEntries(args, keys)), null, 2);
}

function argsAreLong(args) {
  if (!args || typeof args !== "object") return false;
  return json(args).length > 120 || Object.values(args).some((v) => typeof v === "string" && (v.includes("\n") || v.length > 60));
}

// arguments the one-line form cuts ("…"): their whole text goes behind "all arguments"
const argsClipped = (args, width) => !!args && typeof args === "object" && !Array.isArray(args)
  && Object.values(args).some((v) => json(v).length > width);

const isLong = (t) => t.length > LONG_CHARS || t.split("\n").length > LONG_LINES;

// "2 tool calls · 3 model calls · …": tool calls, not "steps", so it never reads against the timeline's entries
function totalsLine(t, nominal) {
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
function treeLine(tree, nominal) {
  const runs = Object.entries((tree && tree.runs) || {});
  if (runs.length < 2) return "";
  const shares = runs.map(([id, r]) => `${id.slice(-6)}: ${plural(r.model_calls || 0, "call", "calls")} ${fmtCost(r.cost, nominal)}`);
  return `with ${plural(runs.length - 1, "sub-agent", "sub-agents")}: ${plural(tree.model_calls || 0, "model call", "model calls")}` +
    ` · ${fmtTokens(tree.tokens)} tokens · ${fmtCost(tree.cost_known === false ? null : tree.cost, nominal)}` +
    ` · ${plural(tree.tool_steps || 0, "tool step", "tool steps")} (by run: ${shares.join(", ")})`;
}

function badge(text, tone, title) {
  return h("span", { class: `nbv-badge nbv-${tone}`, title }, text);
}

function riskBadge(risk) {
  if (!risk) return null;
  const r = String(risk);
  return h("span", { class: `nbv-badge nbv-risk nbv-risk-${r.toLowerCase()}` }, r);
}

const looksLikeDiff = (t) => /^(--- |diff |@@)/.test(t) || t.includes("\n@@ ");

function diffPre(diff) {
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

// ------------------------------------------------------------------------------------------------ Markdown

const INLINE = new RegExp([
  "(?<ticks>`+)(?<code>[\\s\\S]+?)\\k<ticks>",
  "\\[(?<label>[^\\]\\n]+)\\]\\((?<href>https?://[^\\s()<>\"']+)\\)",
  "\\*\\*\\*(?=\\S)(?<bolditalic>[\\s\\S]*?\\S)\\*\\*\\*",
  "(?<mark>\\*\\*|__)(?=\\S)(?<bold>[\\s\\S]*?\\S)\\k<mark>",
  "(?<![\\w*])\\*(?=[^\\s*])(?<em>[\\s\\S]*?[^\\s*])\\*(?![\\w*])",
  "(?<![\\w_])_(?=[^\\s_])(?<em2>[\\s\\S]*?[^\\s_])_(?![\\w_])",
  "~~(?=\\S)(?<del>[\\s\\S]*?\\S)~~",
  "(?<url>https?://[^\\s<>\"'()\\[\\]]+[^\\s<>\"'()\\[\\].,;:!?])",
].join("|"), "g");

function safeLink(href, children) {
  let ok = false;
  try {
    ok = ["http:", "https:"].includes(new URL(href).protocol);
  } catch {
    ok = false;
  }
  if (!ok) return h("span", {}, children);
  return h("a", { href, target: "_blank", rel: "noopener noreferrer nofollow" }, children);
}

function inline(text, parent) {
  const re = new RegExp(INLINE.source, "g");
  let last = 0;
  let m;
  while ((m = re.exec(text)) !== null) {
    if (m.index > last) parent.appendChild(document.createTextNode(text.slice(last, m.index)));
    last = re.lastIndex;
    const g = m.groups;
    if (g.code !== undefined) parent.appendChild(h("code", { text: g.code.trim() }));
    else if (g.label !== undefined) {
      const span = inline(g.label, h("span"));
      parent.appendChild(safeLink(g.href, [...span.childNodes]));
    } else if (g.bolditalic !== undefined) parent.appendChild(h("strong", {}, inline(g.bolditalic, h("em"))));
    else if (g.bold !== undefined) parent.appendChild(inline(g.bold, h("strong")));
    else if (g.em !== undefined || g.em2 !== undefined) parent.appendChild(inline(g.em ?? g.em2, h("em")));
    else if (g.del !== undefined) parent.appendChild(inline(g.del, h("del")));
    else if (g.url !== undefined) parent.appendChild(safeLink(g.url, [g.url]));
  }
  if (last < text.length) parent.appendChild(document.createTextNode(text.slice(last)));
  return parent;
}

const FENCE = /^\s{0,3}(`{3,}|~{3,})\s*([\w+.#-]*)/;
const HEADING = /^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
const UL = /^(\s*)[-*+]\s+(.*)$/;
const OL = /^(\s*)(\d{1,9})[.)]\s+(.*)$/;
const HR = /^\s{0,3}([-*_])(\s*\1){2,}\s*$/;
const TABLE_SEP = /^\s*\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?\s*$/;

function splitRow(line) {
  line = line.trim();
  if (line.startsWith("|")) line = line.slice(1);
  if (line.endsWith("|")) line = line.slice(0, -1);
  return line.split(/(?<!\\)\|/).map((c) => c.trim());
}

function markdown(src, parent) {
  const lines = String(src ?? "").replace(/\r\n/g, "\n").split("\n");
  let para = [];
  const flush = () => {
    if (!para.length) return;
    const p = h("p");
    para.forEach((line, k) => {
      const hard = /( {2}|\\)$/.test(line);
      inline(line.replace(/\\$/, "").trim(), p);
      if (k < para.length - 1) p.appendChild(hard ? h("br") : document.createTextNode(" "));
    });
    parent.appendChild(p);
    para = [];
  };
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    let m = line.match(FENCE);
    if (m) {
      flush();
      const body = [];
      i++;
      while (i < lines.length && !lines[i].trim().startsWith(m[1])) body.push(lines[i++]);
      i++;
      parent.appendChild(h("pre", {}, h("code", { class: m[2] ? `language-${m[2]}` : null, text: body.join("\n") })));
      continue;
    }
    if (!line.trim()) {
      flush();
      i++;
      continue;
    }
    if ((m = line.match(HEADING))) {
      flush();
      parent.appendChild(inline(m[2], h(`h${Math.min(6, m[1].length + 2)}`)));
      i++;
      continue;
    }
    if (HR.test(line) && !para.length) {
      parent.appendChild(h("hr"));
      i++;
      continue;
    }
    if (/^\s*>/.test(line)) {
      flush();
      const quoted = [];
      while (i < lines.length && /^\s*>/.test(lines[i])) quoted.push(lines[i++].replace(/^\s*>\s?/, ""));
      const bq = h("blockquote");
      markdown(quoted.join("\n"), bq);
      parent.appendChild(bq);
      continue;
    }
    if (line.includes("|") && i + 1 < lines.length && TABLE_SEP.test(lines[i + 1])) {
      flush();
      const header = splitRow(line);
      const aligns = splitRow(lines[i + 1]).map((c) =>
        c.startsWith(":") && c.endsWith(":") ? "center" : c.endsWith(":") ? "right" : "");
      i += 2;
      const cell = (tag, text, col) => {
        const el = inline(text || "", h(tag));
        if (aligns[col]) el.style.textAlign = aligns[col];
        return el;
      };
      const tbody = h("tbody");
      while (i < lines.length && lines[i].includes("|") && lines[i].trim()) {
        const row = splitRow(lines[i++]);
        tbody.appendChild(h("tr", {}, header.map((_, c) => cell("td", row[c], c))));
      }
      parent.appendChild(h("table", {}, h("thead", {}, h("tr", {}, header.map((t, c) => cell("th", t, c)))), tbody));
      continue;
    }
    if (UL.test(line) || OL.test(line)) {
      flush();
      i = list(lines, i, parent);
      continue;
    }
    para.push(line);
    i++;
  }
  flush();
  return parent;
}

function list(lines, i, parent) {
  const ordered = !UL.test(lines[i]);
  const RE = ordered ? OL : UL;
  const first = lines[i].match(RE);
  const base = first[1].length;
  const el = h(ordered ? "ol" : "ul");
  if (ordered && Number(first[2]) !== 1) el.setAttribute("start", String(Number(first[2])));
  const items = [];
  while (i < lines.length) {
    const line = lines[i];
    const m = line.match(RE);
    if (m && m[1].length <= base + 1) {
      items.push([ordered ? m[3] : m[2]]);
      i++;
      continue;
    }
    if (!line.trim()) {
      const next = lines[i + 1] || "";
      const nm = next.match(RE);
      if ((nm && nm[1].length <= base + 1) || (next.startsWith(" ".repeat(base + 2)) && next.trim())) {
        i++;
        continue;
      }
      break;
    }
    if (items.length && line.length - line.trimStart().length > base) {
      items[items.length - 1].push(line.startsWith(" ".repeat(base + 2)) ? line.slice(base + 2) : line.trim());
      i++;
      continue;
    }
    break;
  }
  for (const [head, ...rest] of items) {
    const li = inline(head, h("li"));
    if (rest.length) {
      const box = markdown(rest.join("\n"), h("div"));
      if (box.childNodes.length === 1 && box.firstChild.tagName === "P") {
        li.appendChild(document.createTextNode(" "));
        li.append(...box.firstChild.childNodes);
      } else li.append(...box.childNodes);
    }
    el.appendChild(li);
  }
  parent.appendChild(el);
  return i;
}

// ------------------------------------------------------------------------------------------------ the view
//
// The sections of a run view, as pure functions of the view-state dict. Two hosts draw them: the live widget
// (`render`, the anywidget entry point, with the decision panel and the streamed reply) and `renderView`, the
// static record the JupyterLab extension (labextension/) draws for `application/vnd.nbagent.run+json` with no
// kernel: no buttons; a waiting run shows the `%agent` line that answers it. `ctx.open` keeps <details> open
// states by key across re-renders.

const HEAD_STEPS = 8; // a static record with more than MAX_STEPS_SHOWN steps collapses the middle ones
const TAIL_STEPS = 8;
const MAX_STEPS_SHOWN = 20;

function details(ctx, key, summary, body, openByDefault = false) {
  const d = h("details", {}, h("summary", {}, summary), body);
  d.open = ctx.open.has(key) ? ctx.open.get(key) : openByDefault;
  d.addEventListener("toggle", () => ctx.open.set(key, d.open));
  return d;
}

function textBlock(ctx, key, text, label, cls) {
  text = String(text);
  const pre = h("pre", { class: cls, text });
  if (!isLong(text)) return pre;
  const n = text.split("\n").length;
  return details(ctx, key, `${label} (${plural(n, "line", "lines")}, ${text.length.toLocaleString("en-US")} chars)`, pre);
}

function stepEl(ctx, step, n, decisions) {
  const kind = step.kind || "info";
  const status = step.status || "info";
  // icon | kind | the rest: the rest wraps within its own column, never into the gutter
  const main = h("span", { class: "nbv-main" });
  const line = h("span", { class: "nbv-line" },
    h("span", { class: `nbv-icon nbv-${STEP_TONE[status] || "dim"}`, title: status }, STEP_ICON[status] || "·"),
    h("span", { class: "nbv-kind" }, KIND_LABEL[kind] || kind), main);
  const body = [];
  const facts = (items) => h("span", { class: "nbv-facts" }, ` · ${items.filter(Boolean).join(" · ")}`);
  const retries = (r) => (r ? plural(r, "retry", "retries") : "");
  if (kind === "model") {
    main.append(h("code", { text: step.title }), ` → ${step.detail || ""}`,
      h("span", { class: "nbv-facts" }, ` · ${fmtTokens(step.tokens)} tokens · `,
        costEl(step.cost, ctx.nominal), [fmtMs(step.latency_ms), retries(step.retries)].filter(Boolean).map((t) => ` · ${t}`).join("")));
  } else if (kind === "tool") {
    main.append(h("span", { class: "nbv-tool", text: step.tool || step.title }),
      h("span", { class: "nbv-args", text: `(${formatArgs(step.arguments, 60, step.arg_keys)})` }), " ",
      riskBadge(step.risk) || "",
      facts([status === "running" ? "running…" : status, fmtMs(step.duration_ms), retries(step.retries)]));
    // the authorization reason only where it matters: a failure says what went wrong; a high-risk step that ran
    // without asking says why. "READ_ONLY runs without asking" under every read, or the approval (shown once, on
    // its plan card), is noise.
    const why = String(step.detail || "");
    if (status === "failed" && why) body.push(h("span", { class: "nbv-why nbv-bad", text: why }));
    else if (why && step.grant_id) body.push(h("span", { class: "nbv-why nbv-grant-why", text: why }));
    else if (why && step.risk === HIGH && !/^(approved|plan approved)\b/.test(why)) {
      body.push(h("span", { class: "nbv-why", text: why.replace(/\s*\(plan [^)]*\)/, "") }));
    }
    if (step.risk_reason) body.push(h("span", { class: "nbv-why nbv-risk-reason", text: `high risk: ${step.risk_reason}` }));
    if (argsClipped(step.arguments, 60) || argsAreLong(step.arguments)) {
      body.push(details(ctx, `args:${step.id}`, "all arguments", h("pre", { text: argsJson(step.arguments, step.arg_keys) })));
    }
    if (step.result_preview) body.push(textBlock(ctx, `result:${step.id}`, step.result_preview, "result", "nbv-result"));
  } else if (kind === "denied") {
    main.append(h("span", { class: "nbv-tool", text: step.tool || step.title }), " ",
      step.target ? h("code", { text: step.target }) : "",
      step.rule ? h("span", { class: "nbv-facts", text: ` (rule ${step.rule})` }) : "");
    body.push(h("span", { class: "nbv-why nbv-bad", text: step.detail || "" }));
  } else if (kind === "thinking") {
    const text = String(step.detail || "");
    if (isLong(text)) body.push(details(ctx, `think:${step.id}`, clip(text, 90), h("div", { class: "nbv-thinking", text })));
    else main.append(h("span", { class: "nbv-thinking", text }));
  } else if (kind === "question") {
    // the question is shown once: while the live view asks it in its answer box, the step only points there
    if (ctx.asking && ctx.asking === step.request_id && status === "waiting") {
      main.append(h("span", { class: "nbv-facts", text: "waiting for your answer (below)" }));
    } else main.append(h("strong", { text: step.detail || "" }));
    if (step.answer !== undefined && step.answer !== null) {
      const d = decisions.get(step.request_id);
      body.push(h("span", { class: "nbv-why" }, "answer: ", h("q", { text: step.answer }),
        d ? h("span", { title: fmtTs(d.ts), text: ` — answered by ${byWhom(d.by)}${fmtTime(d.ts) ? ` · ${fmtTime(d.ts)}` : ""}` }) : ""));
    }
  } else if (kind === "child") {
    main.append(h("code", { text: shortId(step.child_run_id) }), " ",
      h("span", { class: "nbv-facts", text: clip(step.detail, 200) }));
  } else if (kind === "error") {
    main.append(h("strong", { text: step.title || "error" }), step.retries ? facts([retries(step.retries)]) : "");
    body.push(textBlock(ctx, `err:${step.id}`, step.detail || "", "error", "nbv-error-text"));
  } else if (/^plan (approved|rejected|refined)$/.test(step.title || "")) {
    // a decision: who and when are on its plan card (shown once); the timeline marks where it happened
    const verb = { "plan approved": "plan approved", "plan rejected": "plan denied", "plan refined": "plan sent back with feedback" }[step.title];
    main.append(h("span", { class: "nbv-facts", text: verb }));
  } else {
    main.append(h("span", { class: "nbv-facts", text: step.detail || step.title || "" }));
  }
  return h("li", { class: `nbv-step nbv-k-${kind} nbv-st-${status}`, value: n }, line, body);
}

// ------------------------------------------------------------------------------------------------ plans
//
// What a plan asks is phrased here from its steps (tool, target, risk, risk_reason), never from the model's
// words: the model's purpose is shown as a quote. A plan with a WRITE_HIGH_RISK step gets a card that looks
// and reads differently (danger styling, what makes it high risk, an Approve button that names the action), so
// a delete is never approved with the reflex of a create.

const HIGH = "WRITE_HIGH_RISK";
const FILE_VERB = { delete_file: "delete", write_file: "overwrite", create_file: "create", read_file: "read" };
const HIGH_NOUN = { delete_file: ["delete", "deletes"], write_file: ["overwrite", "overwrites"],
  run_python: ["code run", "code runs"] };

const upperFirst = (t) => (t ? t[0].toUpperCase() + t.slice(1) : t);

function stepTarget(s) {
  if (s.target) return String(s.target);
  const a = s.arguments && typeof s.arguments === "object" ? s.arguments : {};
  return typeof a.path === "string" ? a.path : "";
}

// "delete data.txt", "overwrite report.md", "create notes.md", "run code", "run my_tool"
function stepAction(s) {
  const verb = FILE_VERB[s.tool];
  if (verb) return `${verb} ${clip(stepTarget(s) || "a file", 60)}`;
  if (s.tool === "run_python") return "run code";
  return `run ${s.tool || "a tool"}`;
}

// what one step does, said plainly (for the high-risk line): "deletes data.txt", "runs Python code in the kernel"
function stepEffect(s) {
  const t = clip(stepTarget(s) || "a file", 80);
  const effect = { delete_file: `deletes ${t}`, write_file: `replaces the contents of ${t}`,
    create_file: `creates ${t}` }[s.tool]
    || (s.tool === "run_python" ? "runs Python code in the kernel, with everything the notebook can reach"
      : `runs ${s.tool || "a tool"}${s.target ? ` on ${clip(s.target, 60)}` : ""}, a tool marked high risk`);
  return s.risk_reason ? `${effect}: ${s.risk_reason}` : effect;
}

const isHighRisk = (plan) => (plan.steps || []).some((s) => s.risk === HIGH) || plan.max_risk === HIGH;

/** The Approve button's text: the action for one step, the count (and what is high risk) for several. */
export function approveLabel(plan) {
  const steps = (plan && plan.steps) || [];
  if (steps.length === 1) return upperFirst(stepAction(steps[0]));
  if (!steps.length) return "Approve";
  const counts = new Map();
  for (const s of steps) {
    if (s.risk !== HIGH) continue;
    const noun = HIGH_NOUN[s.tool] || ["high-risk step", "high-risk steps"];
    counts.set(noun, (counts.get(noun) || 0) + 1);
  }
  const high = [...counts].map(([[one, many], n]) => `${n} ${n === 1 ? one : many}`);
  return `Approve ${steps.length} actions${high.length ? ` (${high.join(", ")})` : ""}`;
}

/** What the plan does, in nbagent's words: "delete data.txt"; "3 actions: create a.md, delete b.md, run code". */
export function planSummary(plan) {
  const steps = (plan && plan.steps) || [];
  if (!steps.length) return "no steps";
  if (steps.length === 1) return stepAction(steps[0]);
  const shown = steps.slice(0, 3).map(stepAction);
  return `${steps.length} actions: ${shown.join(", ")}${steps.length > 3 ? `, and ${steps.length - 3} more` : ""}`;
}

/**
 * The approval question, phrased from the plan's steps (what will happen, to what), never from the model's words:
 * "Delete data.txt?", "Delete old.txt and overwrite report.md?", "Run these 3 actions?" (the card lists them).
 */
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
function dangerEl(plan, asking) {
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

const NOT_ASKED = "not asked: a grant or the autonomy answers it, not this decision";

// the runtime's stand-in purpose when the model wrote nothing ("2 tool call(s): a, b"): not the model's words
const NO_NOTE = /^\d+ tool call\(s\): [\w.:-]+(, [\w.:-]+)*$/;

// the model's own words about the plan: shown, but as a quote, never as the question
function purposeEl(plan) {
  if (!plan.purpose || NO_NOTE.test(plan.purpose)) return "";
  return h("div", { class: "nbv-purpose" }, h("span", { class: "nbv-purpose-by", text: "the model says " }),
    h("q", { text: plan.purpose }));
}

function planEl(ctx, plan, index, view, controls) {
  const pending = view.pending || {};
  const waiting = pending.kind === "approval" && pending.plan_id === plan.plan_id;
  const status = plan.status || "proposed";
  const high = isHighRisk(plan);
  const card = h("div", { class: `nbv-plan${waiting ? " nbv-plan-waiting" : ""}${high ? " nbv-plan-high" : ""}`,
    "data-plan-id": plan.plan_id || null },
    h("div", { class: "nbv-plan-head" },
      h("strong", { class: "nbv-plan-title", text: `${index ? `Plan ${index}: ` : "Plan: "}${upperFirst(planSummary(plan))}` }),
      badge(waiting ? "waiting for approval" : PLAN_STATUS[status] || status, waiting ? "warn" : PLAN_TONE[status] || "dim"),
      h("span", { class: "nbv-facts" }, "max risk"), riskBadge(plan.max_risk) || ""),
    purposeEl(plan), high ? dangerEl(plan, waiting || (ctx.static && status === "proposed")) : "");
  const steps = plan.steps || [];
  if (steps.length) {
    card.appendChild(h("table", {},
      h("thead", {}, h("tr", {}, ["#", "tool", "target", "risk", "arguments"].map((t) => h("th", { text: t })))),
      h("tbody", {}, steps.map((s, k) => h("tr", { class: s.risk === HIGH ? "nbv-row-high" : null },
        h("td", { text: k + 1 }), h("td", {}, h("span", { class: "nbv-tool", text: s.tool })),
        h("td", {}, s.target ? h("code", { text: s.target }) : ""),
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
        // a live card opens the diff it asks about; a static record opens every short diff
        const open = (waiting || ctx.static) && lines.length <= DIFF_OPEN_LINES;
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

function bannerEl(view) {
  if (!view.superseded_by) return "";
  return h("div", { class: "nbv-banner nbv-dim nbv-superseded" }, h("strong", { text: "↷ Superseded" }),
    " by run ", h("code", { text: view.superseded_by }), ": an earlier cell was re-run.");
}

// ------------------------------------------------------------------------------------------------ effects
//
// What the run did to the folder and what it was refused, from the log (`view.effects`, nbagent/ui/effects_summary.py,
// which words the text/html record the same way): beside the answer, which is the model's own account and may claim
// what did not happen. And whether an undo put the run's changes back (`undone_by`, `undo_history`).

const fileCount = (fx) => ["created", "changed", "deleted"].reduce((n, k) => n + ((fx || {})[k] || []).length, 0);

function showsEffects(view) {
  const fx = view.effects;
  if (!fx || typeof fx !== "object") return false;
  const ended = !["running", "waiting"].includes(String(view.status || "running"));
  return ended || !!(fileCount(fx) || (fx.refused || []).length || (fx.other || []).length);
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

const VERB_TONE = { created: "ok", changed: "warn", deleted: "bad" };

function effectsEl(view) {
  if (!showsEffects(view)) return "";
  const fx = view.effects;
  const items = [];
  for (const verb of ["created", "changed", "deleted"]) {
    for (const path of fx[verb] || []) {
      items.push(h("li", {}, h("span", { class: `nbv-verb nbv-${VERB_TONE[verb]}`, text: verb }), " ", h("code", { text: path })));
    }
  }
  for (const r of fx.refused || []) {
    items.push(h("li", { class: "nbv-bad" }, h("span", { class: "nbv-verb", text: "⊘ not done" }), ` ${refusalLine(r)}`));
  }
  const other = [...new Set((fx.other || []).map((o) => String(o.tool)))];
  if (other.length) items.push(h("li", { class: "nbv-dim", text: `also ran ${other.join(", ")}: effects not tracked file by file` }));
  const undone = view.undone_by && fileCount(fx) ? ` — put back since by undo run ${view.undone_by}` : "";
  return h("div", { class: "nbv-effects-box" }, h("div", { class: "nbv-section", text: `Effects${undone}` }),
    h("div", { class: "nbv-effects", role: "note", "data-files": fileCount(fx), "data-refused": (fx.refused || []).length },
      items.length ? h("ul", {}, items) : h("p", { class: "nbv-dim", text: "No file was created, changed or deleted." })));
}

// "undone by run U: …" (its changes are not in the folder), or undone and brought back
export function undoNote(view) {
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

function undoBannerEl(view) {
  const [tone, sentence] = undoNote(view);
  if (!sentence) return "";
  const at = sentence.indexOf(": ");
  const head = sentence.slice(0, at);
  return h("div", { class: `nbv-banner nbv-${tone} nbv-undone`, "data-undone-by": view.undone_by || "" },
    h("strong", { text: `↶ ${upperFirst(head)}` }), `: ${sentence.slice(at + 2)}`);
}

// a run that ended with failed or denied calls says so before its answer (as record.py outcome_warning)
function outcomeWarningEl(view) {
  if (view.status !== "completed_with_errors") return "";
  const t = view.totals || {};
  const failed = Number(t.failed || 0);
  const refused = (view.effects || {}).refused;
  const denied = Array.isArray(refused) ? refused.length : Number(t.denied || 0);
  const what = [failed ? plural(failed, "tool call failed", "tool calls failed") : "",
    denied ? plural(denied, "tool call was denied", "tool calls were denied") : ""].filter(Boolean);
  const head = what.length ? what.join(" and ") : "the run recorded errors";
  return h("div", { class: "nbv-banner nbv-warn nbv-outcome" }, h("strong", {
    text: `⚠ ${upperFirst(head)}: the answer is the model's own account and may describe what did not happen; check Effects and Errors`,
  }));
}

function headEl(view, status) {
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

const promptEl = (view) => (view.prompt ? h("div", { class: "nbv-prompt", text: view.prompt }) : "");

// the live view: an interrupted run says how to continue it (a waiting one has its decision panel)
function interruptedEl(view, status) {
  if (status !== "interrupted") return "";
  const rid = shortId(view.run_id);
  return h("div", { class: "nbv-banner nbv-warn" }, h("strong", { text: "■ interrupted" }),
    h("span", { class: "nbv-hint", text: view.pending
      ? `in a new cell: %agent approve ${rid} · %agent deny ${rid} "reason" · %agent refine ${rid} "feedback"`
      : `in a new cell: %agent resume ${rid}` }));
}

// the `%agent` line that answers a waiting run (as nbagent/ui/record.py's pending_hint says it)
function pendingHint(view) {
  const pending = view.pending || {};
  const rid = shortId(view.run_id);
  if (pending.kind === "approval") {
    return `%agent approve ${rid}  ·  %agent deny ${rid} "reason"  ·  %agent refine ${rid} "feedback"`
      + (view.status === "interrupted" ? `  (then %agent resume ${rid})` : "");
  }
  if (pending.kind === "human_input") return `%agent answer ${rid} "your answer"`;
  return `%agent resume ${rid}`;
}

function pendingText(view) {
  const pending = view.pending || {};
  if (pending.kind === "approval") {
    const plan = (view.plans || []).find((p) => p.plan_id === pending.plan_id) || pending.plan;
    return `waiting for approval of plan ${shortId(pending.plan_id)}${plan ? ` (${clip(planSummary(plan), 80)})` : ""}`;
  }
  if (pending.kind === "human_input") {
    const k = (view.steps || []).findIndex((s) => s.kind === "question" && s.request_id === pending.request_id);
    return k >= 0 ? `waiting for an answer to the agent's question (step ${k + 1})`
      : `waiting for an answer to: ${clip(pending.question || "", 200)}`;
  }
  return "waiting";
}

// the static record: a waiting or interrupted run says which `%agent` line continues it
function staticPendingEl(view, status) {
  if (view.superseded_by || status === "superseded") return "";
  if (!view.pending && status !== "interrupted" && status !== "waiting") return "";
  const title = view.pending ? `‖ ${pendingText(view)}` : `■ ${status}`;
  return h("div", { class: "nbv-banner nbv-warn nbv-pending" }, h("strong", { text: title }),
    h("span", { class: "nbv-hint", text: `in a new cell: ${pendingHint(view)}` }));
}

function stepsOl(ctx, steps, start, decisions) {
  const ol = h("ol", { class: "nbv-steps" }, steps.map((s, k) => stepEl(ctx, s, start + k, decisions)));
  if (start !== 1) ol.setAttribute("start", String(start));
  return ol;
}

// the timeline counts its entries (model replies, tool calls, decisions…), not "steps": the totals count tool calls
const timelineLabel = (steps) => `Timeline · ${plural(steps.length, "entry", "entries")}`;

const decisionsByRequest = (view) =>
  new Map((view.decisions || []).filter((d) => d.request_id).map((d) => [d.request_id, d]));

// a static timeline: a long one shows its first and last steps, the middle ones collapsed
function staticStepsEl(ctx, view) {
  const steps = view.steps || [];
  if (!steps.length) return "";
  const decisions = decisionsByRequest(view);
  const out = [h("div", { class: "nbv-section", text: timelineLabel(steps) })];
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
function plansEl(ctx, view, controls) {
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

function answerEl(view) {
  if (!view.answer) return "";
  return h("div", { class: "nbv-answer" }, h("div", { class: "nbv-section", text: "Answer" }),
    markdown(view.answer, h("div", { class: "nbv-md" })));
}

function errorsEl(view) {
  const errors = (view.errors || []).filter(Boolean);
  if (view.error && !errors.includes(view.error)) errors.unshift(view.error);
  if (!errors.length) return "";
  return h("div", {}, h("div", { class: "nbv-section", text: "Errors" }),
    h("ul", { class: "nbv-errors" }, errors.map((e) => h("li", { text: e }))));
}

function footEl(view, withRunId) {
  return h("div", { class: "nbv-foot" },
    h("span", {}, h("strong", { text: "Totals " }), totalsLine(view.totals, !!view.cost_nominal)),
    treeLine(view.tree) ? h("span", { class: "nbv-tree" }, h("strong", { text: "Run tree " }), treeLine(view.tree, !!view.cost_nominal)) : "",
    withRunId && view.run_id ? h("span", {}, h("strong", { text: "Run " }), h("code", { class: "nbv-run-id", text: view.run_id })) : "",
    view.log_path ? h("span", {}, h("strong", { text: "Log " }), h("code", { class: "nbv-log", text: view.log_path })) : "");
}

// a run that ended having changed files: how to undo it (as nbagent/ui/record.py undo_hint says it)
const FILE_CHANGE_TOOLS = new Set(["create_file", "write_file", "delete_file"]);
export function undoHint(view) {
  const status = String(view.status || "running");
  // undone already: its changes are not in the folder to undo (as nbagent/ui/record.py undo_hint)
  if (["running", "waiting"].includes(status) || !view.run_id || view.undone_by) return "";
  const paths = new Set((view.steps || [])
    .filter((s) => s.kind === "tool" && FILE_CHANGE_TOOLS.has(s.tool) && s.status === "ok")
    .map((s) => String(s.target || (s.arguments || {}).path || s.call_id)));
  if (!paths.size) return "";
  const n = paths.size;
  return `%agent undo ${view.run_id} undoes this run's ${n} file ${n === 1 ? "change" : "changes"}`;
}

function undoHintEl(view) {
  const hint = undoHint(view);
  if (!hint) return "";
  const [command, rest] = hint.split(" undoes ");
  return h("p", { class: "nbv-undo-hint" }, h("strong", {}, "↶ Undo "), h("code", { text: command }), ` undoes ${rest}`);
}

/**
 * Draw a run's static record (no buttons, no kernel needed) into `el`; returns the root element.
 * `options.open`: a Map of <details> open states by key, kept across re-renders.
 */
export function renderView(el, view, options = {}) {
  view = view && typeof view === "object" ? view : {};
  const ctx = { open: options.open || new Map(), static: true, nominal: !!view.cost_nominal };
  const status = String(view.status || "running");
  const root = h("div", { class: `nbagent-live nbv-static nbv-status-${status}`, "data-run-id": view.run_id || null },
    bannerEl(view), undoBannerEl(view), headEl(view, status), promptEl(view), staticPendingEl(view, status),
    outcomeWarningEl(view), staticStepsEl(ctx, view), plansEl(ctx, view), effectsEl(view), answerEl(view),
    errorsEl(view), undoHintEl(view), footEl(view, true));
  el.appendChild(root);
  return root;
}

// ------------------------------------------------------------------------------------------------ the live widget
//
// A click is an event, sent as a custom comm message ({event: "decision", ...}, see nbagent/ui/widget.py), never
// as a state sync: ipywidgets' page-side model holds every sync after the first until the kernel reports idle
// for it, which it does not do while the cell awaits the decision. This view never calls `save_changes`.

export const FINAL_EVENT = "nbagent-run-final";
const RUN_MIME = "application/vnd.nbagent.run+json";
// the run whose live view last held the keyboard focus, on <html>: when the run ends and its record replaces the
// view (the focused element goes with it), the lab extension gives the focus to the record (labextension/src/focus.ts)
const FOCUS_ATTR = "data-nbagent-focus";

// Focus. Nothing here takes the keyboard from where the person is: a panel gets the focus only when the focus is
// already in this view (they decided the previous request here). When a redraw, a decision or a closed text box
// removes the focused element, the focus goes to the view itself (tabindex -1), never to the page's body.

function render({ model, el }) {
  const ctx = { open: new Map(), static: false }; // details open state by key, kept across re-renders
  const local = {
    panel: null, // {key, rid, el, note} of the pending request's decision panel, kept across re-renders
    clicked: new Set(), // request ids this view sent a decision for: one per request, whatever is clicked
    mode: null, // "deny" | "refine" while the text line is open
    opener: null, // the button that opened the text line (Deny or Refine): the focus goes back to it
    plansKey: null, // what the plans section was last drawn from
  };
  const root = h("div", { class: "nbagent-live", tabindex: "-1", role: "region", "aria-label": "nbagent run" });
  const parts = {
    banner: h("div"), head: h("div"), prompt: h("div"), pending: h("div"), steps: h("div"),
    stream: h("div"), plans: h("div"), decide: h("div", { class: "nbv-decide-slot" }), answer: h("div"),
    errors: h("div"), foot: h("div"),
  };
  // what a screen reader says when a decision is asked for: a waiting card or a question (polite: it waits for
  // the reader to finish, and it moves no focus)
  const announcer = h("div", { class: "nbv-sr-only", role: "status", "aria-live": "polite", "aria-atomic": "true" });
  root.append(...Object.values(parts), announcer);
  el.appendChild(root);

  // the person's focus is in this view (not the page's body, not another cell)
  const inView = () => {
    const active = document.activeElement;
    return !!active && active !== document.body && root.contains(active);
  };
  const park = () => root.focus({ preventScroll: true });
  root.addEventListener("focusin", () => {
    const runId = (model.get("view") || {}).run_id;
    if (runId) document.documentElement.setAttribute(FOCUS_ATTR, runId);
  });
  root.addEventListener("focusout", (e) => {
    // the person moved on (another cell, the menu): the record that replaces this view must not take the focus
    if (e.relatedTarget && !root.contains(e.relatedTarget)) document.documentElement.removeAttribute(FOCUS_ATTR);
  });

  function disablePanel(text) {
    if (!local.panel) return;
    if (local.panel.el.contains(document.activeElement)) park(); // a disabled button would drop it on the body
    for (const b of local.panel.el.querySelectorAll("button, input")) b.disabled = true;
    if (text) local.panel.note.textContent = text;
  }

  function send(requestId, action, text, scope) {
    if (local.clicked.has(requestId)) return;
    local.clicked.add(requestId);
    try {
      model.send({
        event: "decision", request_id: requestId, action, text: text || "", scope: scope || null,
        nonce: `${Date.now().toString(36)}-${Math.random().toString(36).slice(2)}`,
      });
    } catch (err) {
      local.clicked.delete(requestId);
      if (local.panel) local.panel.note.textContent = `could not send: ${err}`;
      return;
    }
    if (local.panel && local.panel.rid === requestId) {
      const reach = scope === "run" ? " for this run" : scope === "session" ? " for this session" : "";
      disablePanel(`${action === "answer" ? "answer" : action}${reach} sent…`);
    }
  }

  function approvalPanel(view, pending) {
    const rid = pending.request_id;
    const plan = (view.plans || []).find((p) => p.plan_id === pending.plan_id) || pending.plan || { steps: [] };
    const high = isHighRisk(plan);
    const note = h("span", { class: "nbv-sent", role: "status" });
    const input = h("input", { type: "text", class: "nbv-input", "aria-label": "feedback", placeholder: "" });
    // the confirm button says what it does: "Deny: delete old.txt" / "Send feedback", never just "Send"
    const sendBtn = h("button", { class: "nbv-btn", type: "button" }, "Send");
    const cancel = h("button", { class: "nbv-btn nbv-quiet", type: "button" }, "Cancel");
    // a denial may also answer "no" ahead to the same calls (a grant; grants.py), when the plan can be granted
    const offer = plan.grant_offer || [];
    const denyReach = h("select", { class: "nbv-input nbv-reach", "aria-label": "deny how far", hidden: true },
      h("option", { value: "" }, "only this time"),
      h("option", { value: "run" }, "and the same calls for the rest of this run"),
      h("option", { value: "session" }, "and the same calls for this session"));
    const row = h("div", { class: "nbv-text-row", hidden: true }, input, offer.length ? denyReach : "", sendBtn, cancel);
    const submit = () => {
      const text = input.value.trim();
      if (local.mode === "refine" && !text) {
        input.focus();
        input.classList.add("nbv-need");
        return;
      }
      if (local.mode) send(rid, local.mode, text, local.mode === "deny" ? denyReach.value : null);
    };
    const open = (mode) => {
      if (local.mode && local.mode !== mode) input.value = ""; // a reason is not feedback, nor the other way
      local.mode = mode;
      local.opener = mode === "refine" ? refine : deny;
      row.hidden = false;
      input.placeholder = mode === "refine"
        ? "What should the model do differently? (Enter sends)"
        : "Reason for denying (optional; Enter sends)";
      input.setAttribute("aria-label", mode === "refine" ? "feedback for the model" : "reason for denying");
      denyReach.hidden = mode !== "deny";
      sendBtn.textContent = mode === "refine" ? "Send feedback" : denyLabel(plan);
      sendBtn.className = `nbv-btn ${mode === "refine" ? "nbv-refine" : "nbv-deny"}`;
      sendBtn.title = mode === "refine" ? "send the feedback to the model" : "deny the plan; nothing of it runs";
      input.focus();
    };
    input.addEventListener("keydown", (e) => {
      if (e.key === "Enter") {
        e.preventDefault();
        submit();
      } else if (e.key === "Escape") {
        close();
      }
      e.stopPropagation(); // keep JupyterLab's notebook shortcuts out of the text box
    });
    // Escape and Cancel: the box closes empty (a draft kept would be sent with the next reason), and the focus
    // goes back to the button that opened it
    const close = () => {
      row.hidden = true;
      local.mode = null;
      input.value = "";
      input.classList.remove("nbv-need");
      if (local.opener && local.opener.isConnected) local.opener.focus();
      else park();
    };
    input.addEventListener("input", () => input.classList.remove("nbv-need"));
    sendBtn.addEventListener("click", submit);
    cancel.addEventListener("click", close);
    const label = approveLabel(plan);
    const approve = h("button", { class: `nbv-btn nbv-approve${high ? " nbv-approve-danger" : ""}`, type: "button",
      title: `approve: ${planSummary(plan)}`, onclick: () => send(rid, "approve", "") }, label);
    const deny = h("button", { class: "nbv-btn nbv-deny", type: "button", onclick: () => open("deny") }, "Deny");
    const refine = h("button", { class: "nbv-btn nbv-refine", type: "button", onclick: () => open("refine") }, "Refine");
    // "approve for this run / session": the same yes answers later calls of the kind shown, never more (grants.py)
    const covers = offer.join("; ");
    const grantRow = offer.length ? h("div", { class: "nbv-grant-row" },
      h("span", { class: "nbv-facts", text: "or approve, and let later calls like these run without asking: " }),
      h("button", { class: "nbv-btn nbv-quiet nbv-grant", type: "button",
        title: `approve, and allow ${covers} until this run ends`, onclick: () => send(rid, "approve", "", "run") },
        "Approve for this run"),
      h("button", { class: "nbv-btn nbv-quiet nbv-grant", type: "button",
        title: `approve, and allow ${covers} in this session (8 hours)`, onclick: () => send(rid, "approve", "", "session") },
        "Approve for this session"),
      h("div", { class: "nbv-facts nbv-grant-covers", text: `covers: ${covers}` })) : "";
    const el = h("div", { class: `nbv-decide${high ? " nbv-decide-high" : ""}`, role: "group", tabindex: "-1",
      "aria-label": `decision: ${approvalQuestion(plan)}`, "data-request-id": rid },
      h("div", { class: "nbv-decide-q", text: approvalQuestion(plan) }),
      h("div", { class: "nbv-buttons" }, approve, deny, refine, note), grantRow, row);
    return { el, note, say: `waiting for your approval: ${approvalQuestion(plan)}` };
  }

  function questionPanel(pending) {
    const rid = pending.request_id;
    const note = h("span", { class: "nbv-sent", role: "status" });
    const input = h("input", { type: "text", class: "nbv-input", "aria-label": "your answer",
      placeholder: "Your answer (Enter sends)" });
    const answer = h("button", { class: "nbv-btn nbv-approve", type: "button", disabled: true }, "Answer");
    const submit = () => {
      if (input.value.trim()) send(rid, "answer", input.value);
    };
    input.addEventListener("input", () => {
      answer.disabled = !input.value.trim() || local.clicked.has(rid);
    });
    input.addEventListener("keydown", (e) => {
      if (e.key === "Enter") {
        e.preventDefault();
        submit();
      }
      e.stopPropagation();
    });
    answer.addEventListener("click", submit);
    const el = h("div", { class: "nbv-decide", role: "group", tabindex: "-1", "aria-label": "question",
      "data-request-id": rid },
      h("div", { class: "nbv-decide-q" }, "The agent asks: ", h("strong", { text: pending.question || "" })),
      h("div", { class: "nbv-buttons" }, input, answer, note));
    return { el, note, focus: input, say: `the agent asks: ${pending.question || ""}` };
  }

  // the panel of the pending request: built once per request (what is typed in it survives view updates)
  function panelFor(view) {
    const pending = view.pending;
    const key = pending && view.status !== "superseded" ? `${pending.kind}:${pending.request_id}` : "";
    if (local.panel && local.panel.key === key) return local.panel;
    local.mode = null;
    local.opener = null;
    local.panel = null;
    if (!key || !["approval", "human_input"].includes(pending.kind)) return null;
    const built = pending.kind === "approval" ? approvalPanel(view, pending) : questionPanel(pending);
    local.panel = { key, rid: pending.request_id, kind: pending.kind, ...built };
    markDecided();
    return local.panel;
  }

  // the kernel accepted a decision for this request (any view of it), or this view sent one
  function markDecided() {
    const p = local.panel;
    if (!p) return;
    if ((model.get("decided") || "") === p.rid) disablePanel("decision received");
    else if (local.clicked.has(p.rid)) disablePanel();
  }

  function drawPlans(view) {
    const panel = panelFor(view);
    const key = json([view.plans, view.pending, view.decisions, view.status, panel && panel.key]);
    if (key === local.plansKey) return;
    local.plansKey = key;
    const here = inView(); // the person is in this view: a new request may take the focus
    const focused = panel && panel.el.contains(document.activeElement) ? document.activeElement : null;
    const controls = panel && panel.kind === "approval" ? panel.el : null;
    parts.plans.replaceChildren(plansEl(ctx, view, controls));
    parts.decide.replaceChildren(panel && panel.kind === "human_input" ? panel.el : "");
    if (focused && focused.isConnected) focused.focus();
    else if (panel && !panel.shown && panel.el.isConnected) {
      panel.shown = true;
      announcer.textContent = panel.say;
      // only for a person already in this view: a question's box (to type in), an approval's group (not its
      // Approve button: a second Enter must not approve a plan nobody has read)
      if (here) (panel.focus || panel.el).focus({ preventScroll: false });
    }
  }

  function drawStream() {
    const view = model.get("view") || {};
    const text = model.get("streaming") || "";
    parts.stream.replaceChildren();
    if (!text || !["running", undefined].includes(view.status)) return;
    parts.stream.append(h("div", { class: "nbv-stream", "aria-live": "polite" },
      h("span", { class: "nbv-kind" }, "model"), h("span", { class: "nbv-stream-text", text }),
      h("span", { class: "nbv-caret", "aria-hidden": "true" })));
  }

  function draw() {
    const hadFocus = inView();
    const view = model.get("view") || {};
    const status = view.status || "running";
    ctx.nominal = !!view.cost_nominal;
    ctx.asking = view.pending && view.pending.kind === "human_input" ? view.pending.request_id : null;
    root.className = `nbagent-live nbv-status-${status}`;

    parts.banner.replaceChildren(bannerEl(view));
    parts.head.replaceChildren(headEl(view, status));
    parts.prompt.replaceChildren(promptEl(view));
    parts.pending.replaceChildren(interruptedEl(view, status));

    // steps: a scrolling list that follows the newest step unless the reader scrolled up
    const old = parts.steps.querySelector(".nbv-steps");
    const atBottom = !old || old.scrollHeight - old.scrollTop - old.clientHeight < 24;
    const prevTop = old ? old.scrollTop : 0;
    const steps = view.steps || [];
    parts.steps.replaceChildren();
    if (steps.length) {
      const ol = stepsOl(ctx, steps, 1, decisionsByRequest(view));
      parts.steps.append(h("div", { class: "nbv-section", text: timelineLabel(steps) }), ol);
      ol.scrollTop = atBottom ? ol.scrollHeight : prevTop;
    } else if (status === "running") {
      parts.steps.append(h("div", { class: "nbv-facts nbv-starting", text: "starting…" }));
    }

    drawPlans(view);
    parts.answer.replaceChildren(effectsEl(view), answerEl(view));
    parts.errors.replaceChildren(errorsEl(view));
    parts.foot.replaceChildren(footEl(view, false));

    drawStream();
    if (hadFocus && !inView()) park(); // what held the focus was redrawn away
    announceFinal();
  }

  // A run that ended: its record replaces this view. The kernel does that by display id, which a page reload
  // loses (the view itself comes back: ipywidgets restores it from the kernel), so the view also tells the page:
  // the lab extension (labextension/src/records.ts) puts the record, with its text/html and text/plain, in this
  // output in its place. Only the kernel says when (`ended`): a status such as "interrupted" is also what a
  // resumed run shows before it goes on, and a view replaced then would leave its run waiting with no buttons.
  let announced = false;
  function announceFinal() {
    const ended = model.get("ended");
    if (announced || !ended || typeof ended !== "object" || !Object.keys(ended).length) return;
    const view = ended[RUN_MIME] || model.get("view") || {};
    if (!view.run_id) return;
    announced = true;
    el.dispatchEvent(new CustomEvent(FINAL_EVENT, { bubbles: true, detail: { view, bundle: ended } }));
  }

  const onView = () => draw();
  const onStream = () => drawStream();
  const onDecided = () => markDecided();
  const onEnded = () => announceFinal();
  model.on("change:view", onView);
  model.on("change:streaming", onStream);
  model.on("change:decided", onDecided);
  model.on("change:ended", onEnded);
  draw();
  // tell the kernel someone can see this view, so a decision it needs can be asked here (nbagent/ui/widget.py)
  try {
    model.send({ event: "rendered" });
  } catch {
    // a host without custom messages: the kernel then treats the run as headless
  }
  return () => {
    model.off("change:view", onView);
    model.off("change:streaming", onStream);
    model.off("change:decided", onDecided);
    model.off("change:ended", onEnded);
  };
}

// ------------------------------------------------------------------------------------------------ the Undo panel
//
// `%agent undo RUN` with a person at the page (nbagent/ui/widget.py UndoView): model traits `offer` ({run_id,
// changes: [{path, action}], not_undoable}) and `result` (set by the kernel once the undo ran). "Undo" first asks,
// listing each file and what happens to it; "Undo N changes" sends `{event: "undo"}` (a custom message, like a
// decision), "Cancel" goes back. The result: done (what was restored), or refused with each conflict's diff.

function renderUndo({ model, el }) {
  const local = { asking: false, sent: false, note: "" };
  const root = h("div", { class: "nbagent-live nbv-undo", tabindex: "-1", role: "region", "aria-label": "nbagent undo" });
  el.appendChild(root);
  const inView = () => !!document.activeElement && document.activeElement !== document.body
    && root.contains(document.activeElement);

  function changesList(items) {
    return h("ul", { class: "nbv-undo-list" }, items.map((c) =>
      h("li", {}, h("code", { text: c.path }), " — ", h("span", { class: "nbv-undo-action", text: c.action }),
        c.overwrites_edit ? h("span", { class: "nbv-why", text: " (edited since the run: that edit is overwritten)" }) : "")));
  }

  function send() {
    if (local.sent) return;
    local.sent = true;
    try {
      model.send({ event: "undo", nonce: `${Date.now().toString(36)}-${Math.random().toString(36).slice(2)}` });
      local.note = "undoing…";
    } catch (err) {
      local.sent = false;
      local.note = `could not send: ${err}`;
    }
    draw();
  }

  function resultEl(offer, result) {
    const state = result.state;
    if (state === "done") {
      return h("div", { class: "nbv-undo-result nbv-undo-done", role: "status", tabindex: "-1" },
        h("div", { class: "nbv-undo-title" }, badge("✓ undone", "ok"),
          ` ${plural((result.restored || []).length, "file", "files")} put back (undo run `,
          h("code", { text: result.undo_run_id || "" }), ")"),
        changesList(result.restored || []),
        h("div", { class: "nbv-hint", text: `The undo is a recorded run: %agent undo ${result.undo_run_id} undoes it.` }));
    }
    if (state === "refused") {
      const conflicts = result.conflicts || [];
      return h("div", { class: "nbv-undo-result nbv-undo-refused", role: "status", tabindex: "-1" },
        h("div", { class: "nbv-undo-title" }, badge("⚠ undo refused", "warn"),
          ` ${plural(conflicts.length, "file was", "files were")} changed since the run; nothing was changed.`),
        conflicts.map((c) => h("div", { class: "nbv-undo-conflict" },
          h("div", {}, h("code", { text: c.path }), ": ", c.reason || ""), c.diff ? diffPre(c.diff) : "")),
        h("div", { class: "nbv-hint", text: `To restore anyway: %agent undo ${offer.run_id} --force` }));
    }
    return h("div", { class: "nbv-undo-result nbv-undo-failed", role: "status", tabindex: "-1" },
      h("div", { class: "nbv-undo-title" }, badge("✗ undo failed", "bad")),
      h("pre", { class: "nbv-undo-text", text: result.text || "" }));
  }

  // every step redraws the panel: the focus of a person using it stays in it (on the question, the result, or the
  // panel), never on the page's body
  function draw() {
    const hadFocus = inView();
    paint();
    if (hadFocus && !inView()) (root.querySelector(".nbv-undo-ask, .nbv-undo-result") || root).focus();
  }

  function paint() {
    const offer = model.get("offer") || {};
    const result = model.get("result") || {};
    const changes = offer.changes || [];
    const n = changes.length;
    root.replaceChildren(h("div", { class: "nbv-undo-head" }, h("strong", {}, "Undo run "),
      h("code", { class: "nbv-run-id", text: offer.run_id || "" }),
      h("span", { class: "nbv-facts", text: ` · it changed ${plural(n, "file", "files")}` })));
    if (result.state) {
      root.append(resultEl(offer, result));
      return;
    }
    // the preview (nbagent/ui/widget.py undo_offer) found that nothing would be undone: a file changed since the
    // run, or an earlier undo already put it back. Said before any button, and there is none to press.
    if (offer.state === "conflicts" || offer.state === "undone") {
      const conflicts = offer.conflicts || [];
      root.append(h("div", { class: `nbv-undo-result ${offer.state === "conflicts" ? "nbv-undo-refused" : "nbv-undo-failed"}`,
        role: "status", tabindex: "-1" },
        h("div", { class: "nbv-undo-title" },
          badge(offer.state === "conflicts" ? "⚠ nothing to undo as it is" : "↶ already undone", "warn"),
          ` ${offer.why_not || ""}`),
        conflicts.map((c) => h("div", { class: "nbv-undo-conflict" },
          h("div", {}, h("code", { text: c.path }), ": ", c.reason || ""), c.diff ? diffPre(c.diff) : ""))));
      return;
    }
    const label = offer.button || `Undo ${plural(n, "change", "changes")}`;
    const notUndoable = offer.not_undoable || [];
    const cannot = notUndoable.length
      ? h("div", { class: "nbv-undo-cannot" }, h("div", { text: "Not undoable (listed, not touched):" }),
        h("ul", {}, notUndoable.map((t) => h("li", { text: t }))))
      : "";
    const note = h("span", { class: "nbv-sent", role: "status", text: local.note });
    if (!local.asking) {
      root.append(h("div", { class: "nbv-buttons" },
        h("button", { class: "nbv-btn", type: "button", title: "see what an undo would change, then confirm",
          onclick: () => { local.asking = true; draw(); } }, "Undo"), note));
      return;
    }
    root.append(h("div", { class: "nbv-decide nbv-undo-ask", role: "group", "aria-label": "undo", tabindex: "-1" },
      h("div", { class: "nbv-decide-q", text: `Undo ${plural(n, "change", "changes")}? Each file goes back to how it was before the run:` }),
      changesList(changes), cannot,
      h("div", { class: "nbv-buttons" },
        h("button", { class: "nbv-btn nbv-approve", type: "button", disabled: local.sent, onclick: send }, label),
        h("button", { class: "nbv-btn nbv-quiet", type: "button", disabled: local.sent,
          onclick: () => { local.asking = false; draw(); } }, "Cancel"),
        note)));
  }

  const onChange = () => draw();
  model.on("change:result", onChange);
  model.on("change:offer", onChange);
  draw();
  try {
    model.send({ event: "rendered" });
  } catch {
    // no custom messages: the kernel falls back to undoing from the command itself
  }
  return () => {
    model.off("change:result", onChange);
    model.off("change:offer", onChange);
  };
}

function renderAny(args) {
  const offer = args.model.get("offer");
  return offer && typeof offer === "object" && offer.run_id ? renderUndo(args) : render(args);
}

export default { render: renderAny };
