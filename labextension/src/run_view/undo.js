// ------------------------------------------------------------------------------------------------ the Undo panel
//
// `%agent undo RUN` with a person at the page (nbagent/ui/widget.py UndoView): model traits `offer` ({run_id,
// changes: [{path, action}], not_undoable}) and `result` (set by the kernel once the undo ran). "Undo" first asks,
// listing each file and what happens to it; "Undo N changes" sends `{event: "undo"}` (a custom message, like a
// decision), "Cancel" goes back. The result: done (what was restored), or refused with each conflict's diff.
// The sentences come from the kernel (`offer.summary`, `offer.question`, `result.said`, `result.hint`: worded by
// what changed, files or the agent's cells, nbagent/ui/undo_view.py); a cell the person edited since is listed as
// kept, and is no change.

import { h, plural, badge, diffPre } from "./format.js";

// "1 file was", "2 cells were", "1 file and 1 cell were": what changed since, by what it is (conflict paths of cells
// are "cell ID", as nbagent/undo.py names them)
export function conflictsSaid(conflicts) {
  const cells = conflicts.filter((c) => String(c.path || "").startsWith("cell ")).length;
  const files = conflicts.length - cells;
  const what = [files ? plural(files, "file", "files") : "", cells ? plural(cells, "cell", "cells") : ""].filter(Boolean);
  return `${what.join(" and ") || "nothing"} ${conflicts.length === 1 ? "was" : "were"}`;
}

export function renderUndo({ model, el }) {
  const local = { asking: false, sent: false, note: "" };
  const root = h("div", { class: "nbagent-live nbv-undo", tabindex: "-1", role: "region", "aria-label": "nbagent undo" });
  el.appendChild(root);
  const inView = () => !!document.activeElement && document.activeElement !== document.body
    && root.contains(document.activeElement);

  function changesList(items) {
    return h("ul", { class: "nbv-undo-list" }, items.map((c) =>
      h("li", { class: c.kept ? "nbv-dim nbv-undo-kept" : null }, h("code", { text: c.path }), " — ",
        h("span", { class: "nbv-undo-action", text: c.action }),
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
          ` ${result.said || plural((result.restored || []).length, "file", "files") + " put back"} (undo run `,
          h("code", { text: result.undo_run_id || "" }), ")"),
        changesList([...(result.restored || []), ...(result.cells || [])]),
        h("div", { class: "nbv-hint", text: result.hint || `The undo is a recorded run: %agent undo ${result.undo_run_id} undoes it.` }));
    }
    if (state === "refused") {
      const conflicts = result.conflicts || [];
      return h("div", { class: "nbv-undo-result nbv-undo-refused", role: "status", tabindex: "-1" },
        h("div", { class: "nbv-undo-title" }, badge("⚠ undo refused", "warn"),
          ` ${conflictsSaid(conflicts)} changed since the run; nothing was changed.`),
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
    const n = changes.filter((c) => !c.kept).length;
    root.replaceChildren(h("div", { class: "nbv-undo-head" }, h("strong", {}, "Undo run "),
      h("code", { class: "nbv-run-id", text: offer.run_id || "" }),
      h("span", { class: "nbv-facts", text: ` · ${offer.summary || `it changed ${plural(changes.length, "file", "files")}`}` })));
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
      h("div", { class: "nbv-decide-q", text: offer.question || `Undo ${plural(n, "change", "changes")}? Each file goes back to how it was before the run:` }),
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
