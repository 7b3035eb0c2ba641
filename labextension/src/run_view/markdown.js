// The model's answer, Markdown, drawn as safe DOM: markdown-it renders it (CommonMark with tables and
// strikethrough, raw HTML off: any tag in the text comes out as text), then DOMPurify sanitises the result against
// a short allow-list, so a gap in either alone lets no markup through. The same rules as the saved record's
// `markdown_html` (nbagent/ui/record_markdown.py: markdown-it-py, then nh3): headings from h3 down, links only to
// http, https and mailto (a refused link keeps its text), an image shown as a link to it (no external assets),
// code blocks keep a `language-*` class and nothing else.

import DOMPurify from "dompurify";
import MarkdownIt from "markdown-it";

export const LINK_SCHEMES = ["http", "https", "mailto"];
export const LINK_REL = "noopener noreferrer";
const SCHEME = /^([A-Za-z][A-Za-z0-9+.-]*):/;
const CODE_CLASS = /^language-[\w+.#-]{1,40}$/;
const TAGS = ["p", "br", "hr", "h3", "h4", "h5", "h6", "strong", "em", "s", "del", "code", "pre", "blockquote", "ul",
  "ol", "li", "table", "thead", "tbody", "tr", "th", "td", "a"];
const ATTRS = { a: ["href"], ol: ["start"], code: ["class"], th: ["style"], td: ["style"] };
const ALIGN = /^text-align:\s*(left|right|center)\s*;?$/;

/** Only absolute http, https and mailto links are followed; anything else (javascript:, data:, a path the notebook
 * server would resolve) is shown as text. */
export function linkAllowed(url) {
  const m = SCHEME.exec(String(url || ""));
  return !!m && LINK_SCHEMES.includes(m[1].toLowerCase());
}

function markdownIt() {
  const md = new MarkdownIt("commonmark", { html: false }).enable(["table", "strikethrough"]);
  md.validateLink = () => true; // links are judged below, so a refused one keeps its text, not its syntax
  md.core.ruler.push("nbagent_links", (state) => {
    for (const block of state.tokens) {
      if (block.type === "heading_open" || block.type === "heading_close") {
        block.tag = `h${Math.min(6, Number(block.tag[1]) + 2)}`; // the answer sits under the record's headings
      }
      let refused = false; // CommonMark links never nest: a link_close closes the last link_open
      for (const token of block.children || []) {
        token.meta = token.meta || {};
        if (token.type === "link_open") {
          refused = !linkAllowed(token.attrGet("href"));
          token.meta.refused = refused;
        } else if (token.type === "link_close") {
          token.meta.refused = refused;
        } else if (token.type === "image") {
          token.meta.refused = !linkAllowed(token.attrGet("src"));
        }
      }
    }
  });
  const link = (tokens, idx, options, env, self) =>
    tokens[idx].meta && tokens[idx].meta.refused ? "" : self.renderToken(tokens, idx, options);
  md.renderer.rules.link_open = link;
  md.renderer.rules.link_close = link;
  md.renderer.rules.image = (tokens, idx, options, env, self) => {
    const token = tokens[idx];
    const alt = md.utils.escapeHtml(self.renderInlineAsText(token.children || [], options, env) || "image");
    if (token.meta && token.meta.refused) return alt;
    return `<a href="${md.utils.escapeHtml(String(token.attrGet("src")))}">image: ${alt}</a>`;
  };
  return md;
}

let MD = null;
let PURIFY = null;

function purifier() {
  const purify = DOMPurify(window);
  purify.addHook("uponSanitizeAttribute", (node, data) => {
    const tag = node.nodeName.toLowerCase();
    const allowed = ATTRS[tag] || [];
    if (!allowed.includes(data.attrName)) data.keepAttr = false;
    else if (tag === "a" && data.attrName === "href") data.keepAttr = linkAllowed(data.attrValue);
    else if (data.attrName === "class") data.keepAttr = CODE_CLASS.test(data.attrValue);
    else if (data.attrName === "style") data.keepAttr = ALIGN.test(data.attrValue.trim());
    else if (data.attrName === "start") data.keepAttr = /^\d{1,9}$/.test(data.attrValue);
  });
  purify.addHook("afterSanitizeAttributes", (node) => {
    if (node.nodeName.toLowerCase() === "a" && node.hasAttribute("href")) {
      node.setAttribute("target", "_blank");
      node.setAttribute("rel", LINK_REL);
    }
  });
  return purify;
}

/** Untrusted Markdown (the model's answer) rendered into `parent` as sanitised DOM nodes; returns `parent`. */
export function markdown(source, parent) {
  MD = MD || markdownIt();
  PURIFY = PURIFY || purifier();
  const rendered = MD.render(String(source ?? "").replace(/\0/g, ""));
  const fragment = PURIFY.sanitize(rendered, {
    ALLOWED_TAGS: TAGS, ALLOWED_ATTR: ["href", "start", "class", "style", "target", "rel"], ALLOW_DATA_ATTR: false,
    ALLOWED_URI_REGEXP: /^(?:https?|mailto):/i, FORBID_CONTENTS: ["script", "style"], RETURN_DOM_FRAGMENT: true,
  });
  parent.appendChild(fragment);
  return parent;
}
