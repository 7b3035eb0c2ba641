// ------------------------------------------------------------------------------------------------ the timeline
//
// One step of the timeline (`stepEl`) and the collapsible blocks it is made of. The sections of a run view are
// pure functions of the view-state dict, drawn by the live widget (live.js, the anywidget entry point, with the
// decision panel and the streamed reply); a run's record is the kernel's HTML (saved.js). `ctx.open` keeps <details>
// open states by key across re-renders.

import { STEP_ICON, STEP_TONE, KIND_LABEL, h, fmtMs, fmtTokens, fmtTime, byWhom, costEl, fmtTs, shortId, plural, clip, formatArgs, argsJson, argsAreLong, argsClipped, isLong, riskBadge } from "./format.js";
import { HIGH } from "./plans.js";

export function details(ctx, key, summary, body, openByDefault = false) {
  const d = h("details", {}, h("summary", {}, summary), body);
  d.open = ctx.open.has(key) ? ctx.open.get(key) : openByDefault;
  d.addEventListener("toggle", () => ctx.open.set(key, d.open));
  return d;
}

export function textBlock(ctx, key, text, label, cls) {
  text = String(text);
  const pre = h("pre", { class: cls, text });
  if (!isLong(text)) return pre;
  const n = text.split("\n").length;
  return details(ctx, key, `${label} (${plural(n, "line", "lines")}, ${text.length.toLocaleString("en-US")} chars)`, pre);
}

// a failed or interrupted step's error, when its sentence does not already say it (record_words.why_shown)
export function whyShown(step) {
  const detail = String(step.detail || "");
  if (!["failed", "interrupted"].includes(step.status) || !detail) return "";
  return String(step.outcome || "").includes(detail.split(/\s+/).join(" ").trim()) ? "" : detail;
}

// A tool step worded as a sentence by the kernel (`step.outcome`, nbagent/ui/step_words.py): the icon, then what it
// did ("✗ raised KeyError: 'Revenue'", "wrote log.md, 16 bytes, +1 line"), then the call; its traceback and its
// raw result (JSON, digests) behind disclosures. As nbagent/ui/record_html.py `_said_html`.
function saidStep(ctx, step, line, main, body, facts, retries) {
  const status = step.status || "info";
  line.querySelector(".nbv-kind").remove(); // the sentence names what was done; the tool's name follows it
  line.classList.add("nbv-said"); // (its sentence takes the kind's column too)
  const tone = STEP_TONE[status] || "dim";
  main.append(h("span", { class: `nbv-said-text${tone === "ok" ? "" : ` nbv-${tone}`}`, text: step.outcome }),
    h("span", { class: "nbv-facts", text: " · " }), h("span", { class: "nbv-tool", text: step.tool || step.title }),
    h("span", { class: "nbv-args", text: `(${formatArgs(step.arguments, 60, step.arg_keys)})` }), " ",
    riskBadge(step.risk) || "");
  const more = [status === "interrupted" ? "" : fmtMs(step.duration_ms), retries(step.retries)].filter(Boolean);
  if (more.length) main.append(facts(more));
  const why = whyShown(step);
  if (why) body.push(h("span", { class: "nbv-why nbv-bad", text: why }));
  else if (step.detail && step.grant_id) body.push(h("span", { class: "nbv-why nbv-grant-why", text: step.detail }));
  if (step.risk_reason) body.push(h("span", { class: "nbv-why nbv-risk-reason", text: `high risk: ${step.risk_reason}` }));
  if (step.traceback) {
    body.push(details(ctx, `tb:${step.id}`, "traceback (its end)", h("pre", { class: "nbv-traceback", text: step.traceback })));
  }
  if (argsClipped(step.arguments, 60) || argsAreLong(step.arguments)) {
    body.push(details(ctx, `args:${step.id}`, "all arguments", h("pre", { text: argsJson(step.arguments, step.arg_keys) })));
  }
  if (step.result_preview) {
    body.push(details(ctx, `result:${step.id}`, "result", h("pre", { class: "nbv-result", text: step.result_preview })));
  }
}

export function stepEl(ctx, step, n, decisions) {
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
  } else if (kind === "tool" && step.outcome) {
    saidStep(ctx, step, line, main, body, facts, retries);
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
  // a compaction's summary: what the model works from in place of earlier requests, behind the record's label
  if (step.summary) {
    body.push(details(ctx, `summary:${step.id}`, step.summary_label || "the summary the model works from",
      h("pre", { class: "nbv-summary", text: String(step.summary) })));
  }
  return h("li", { class: `nbv-step nbv-k-${kind} nbv-st-${status}`, value: n }, line, body);
}
