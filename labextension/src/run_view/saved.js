// ------------------------------------------------------------------------------------------------ the saved record
//
// A run's record is drawn once, by the kernel: nbagent/ui/record_html.py makes its HTML, which the saved notebook
// keeps as text/html (what nbconvert, GitHub and any viewer show). The lab extension shows that same HTML and only
// attaches behaviour (Undo…, Reproduce, the focus, which disclosures are open). The HTML comes from a notebook file,
// which anyone can craft, so it reaches the page through DOMPurify with the record's own allow-list: the tags and
// attributes record_html.py writes, class names of the record only (`nbr-…`, a code block's `language-…`), links to
// http, https and mailto only, no style element (the stylesheet is the extension's: a notebook never styles the
// page), no image, form, script or handler. What it attaches: each decision's time on the reader's clock (the
// kernel writes UTC), and which disclosures are open.

import DOMPurify from "dompurify";

import { LINK_REL, linkAllowed } from "./markdown.js";

export const RECORD_ROOT = "nbagent-run";
const TAGS = ["div", "span", "p", "br", "hr", "h3", "h4", "h5", "h6", "strong", "em", "s", "del", "q", "code", "pre",
  "blockquote", "ul", "ol", "li", "table", "thead", "tbody", "tr", "th", "td", "a", "details", "summary", "time"];
const ATTRS = ["class", "title", "start", "open", "role", "href", "style", "datetime"];
const DATETIME = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/;
const CLASS = /^(nbagent-run|nbr-[\w-]{1,60}|language-[\w+.#-]{1,40})$/;
const ALIGN = /^text-align:\s*(left|right|center)\s*;?$/;
const DATA = /^data-(run-id|plan-id|cell-id|files|cells|refused|undone-by)$/;

let PURIFY = null;

function purifier() {
  const purify = DOMPurify(window);
  purify.addHook("uponSanitizeAttribute", (node, data) => {
    const tag = node.nodeName.toLowerCase();
    const name = data.attrName;
    if (name.startsWith("data-")) data.keepAttr = DATA.test(name);
    else if (name === "class") {
      data.attrValue = data.attrValue.split(/\s+/).filter((c) => CLASS.test(c)).join(" ");
      data.keepAttr = !!data.attrValue;
    } else if (name === "style") data.keepAttr = (tag === "th" || tag === "td") && ALIGN.test(data.attrValue.trim());
    else if (name === "href") data.keepAttr = tag === "a" && linkAllowed(data.attrValue);
    else if (name === "start") data.keepAttr = /^\d{1,9}$/.test(data.attrValue);
    else if (name === "role") data.keepAttr = data.attrValue === "note";
    else if (name === "datetime") data.keepAttr = tag === "time" && DATETIME.test(data.attrValue);
  });
  purify.addHook("afterSanitizeAttributes", (node) => {
    if (node.nodeName.toLowerCase() === "a" && node.hasAttribute("href")) {
      node.setAttribute("target", "_blank");
      node.setAttribute("rel", LINK_REL);
    }
  });
  return purify;
}

/** The record's HTML (a saved text/html: a string, or nbformat's list of lines) as safe DOM nodes. */
export function recordFragment(html) {
  PURIFY = PURIFY || purifier();
  const text = Array.isArray(html) ? html.join("") : String(html ?? "");
  return PURIFY.sanitize(text.replace(/\0/g, ""), {
    ALLOWED_TAGS: TAGS, ALLOWED_ATTR: ATTRS, ALLOW_DATA_ATTR: true, ALLOW_ARIA_ATTR: false,
    ADD_URI_SAFE_ATTR: ["datetime", "start"], // (checked by the hook above: not links)
    ALLOWED_URI_REGEXP: /^(?:https?|mailto):/i, FORBID_CONTENTS: ["script", "style"], RETURN_DOM_FRAGMENT: true,
  });
}

// run id -> whether its folded record is open: the person's choice, for every record of that run on the page (the
// lab extension replaces a record's output when the run's state changes, and the new one opens as they left it)
export const RECORD_OPEN = new Map();

/**
 * Show the record's HTML in `el`; returns its root (`.nbagent-run`), or throws when the HTML holds no record.
 * `options.open`: a Map of the other disclosures' open states (by their order), kept across re-renders.
 */
export function renderRecord(el, html, options = {}) {
  const fragment = recordFragment(html);
  const root = fragment.querySelector(`.${RECORD_ROOT}`);
  if (!root) throw new Error("its text/html holds no nbagent record");
  el.appendChild(root);
  // a decision's time, which the kernel writes in UTC, on the reader's own clock (the whole of it on hover)
  for (const t of root.querySelectorAll("time[datetime]")) {
    const d = new Date(t.getAttribute("datetime"));
    if (Number.isNaN(d.getTime())) continue;
    t.textContent = d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
    t.setAttribute("title", d.toLocaleString());
  }
  const runId = root.getAttribute("data-run-id") || "";
  const open = options.open || new Map();
  root.querySelectorAll("details").forEach((d, k) => {
    const folded = d.classList.contains("nbr-compact");
    const key = folded ? runId : k;
    const kept = folded ? RECORD_OPEN.get(runId) : open.get(key);
    if (kept !== undefined) d.open = kept;
    d.addEventListener("toggle", () => (folded ? RECORD_OPEN : open).set(key, d.open));
  });
  return root;
}
