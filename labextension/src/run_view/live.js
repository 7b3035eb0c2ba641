// ------------------------------------------------------------------------------------------------ the live widget
//
// A click is an event, sent as a custom comm message ({event: "decision", ...}, see nbagent/ui/widget.py), never
// as a state sync: ipywidgets' page-side model holds every sync after the first until the kernel reports idle
// for it, which it does not do while the cell awaits the decision. This view never calls `save_changes`.

import { h, json, said } from "./format.js";
import { isHighRisk, approveLabel, planSummary, approvalQuestion, denyLabel, bannerEl } from "./plans.js";
import { effectsEl, headEl, promptEl, interruptedEl, stepsOl, timelineLabel, decisionsByRequest, plansEl, answerEl, errorsEl, footEl } from "./record.js";

export const FINAL_EVENT = "nbagent-run-final";
export const RUN_MIME = "application/vnd.nbagent.run+json";
// the run whose live view last held the keyboard focus, on <html>: when the run ends and its record replaces the
// view (the focused element goes with it), the lab extension gives the focus to the record (labextension/src/focus.ts)
export const FOCUS_ATTR = "data-nbagent-focus";

// Focus. Nothing here takes the keyboard from where the person is: a panel gets the focus only when the focus is
// already in this view (they decided the previous request here). When a redraw, a decision or a closed text box
// removes the focused element, the focus goes to the view itself (tabindex -1), never to the page's body.

export function render({ model, el }) {
  const ctx = { open: new Map() }; // details open state by key, kept across re-renders
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
      parts.steps.append(h("div", { class: "nbv-section", text: said(view, "timeline", () => timelineLabel(steps)) }), ol);
      ol.scrollTop = atBottom ? ol.scrollHeight : prevTop;
    } else if (status === "running") {
      parts.steps.append(h("div", { class: "nbv-facts nbv-starting", text: "starting…" }));
    }

    drawPlans(view);
    parts.answer.replaceChildren(effectsEl(view), answerEl(view));
    parts.errors.replaceChildren(errorsEl(view));
    parts.foot.replaceChildren(footEl(view));

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
