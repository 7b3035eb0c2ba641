import { readFileSync } from 'fs';
import { join } from 'path';

import { describe, expect, it } from 'vitest';

// @ts-expect-error: the committed bundle, as the widget and the lab extension load it
import { renderRecord } from '../../nbagent/ui/run_view.js';
import { recordHtmls } from './kernel_record';

// The record is drawn once, by the kernel (nbagent/ui/record_html.py), and the page shows that HTML through the
// record's sanitiser (src/run_view/saved.js). Over generated hostile runs (every string of the pipeline's views
// carrying markup, handlers, links and control characters, a different mix per run) the page shows exactly the
// kernel's record: the same text and the same elements, the sanitiser having taken out nothing of it, and no markup of
// the model's, a tool's or a person's ever becomes an element, a handler, a style or a link.
const FIXTURES = process.env.NBAGENT_VIEW_FIXTURES || join(__dirname, 'fixtures');
const load = (name: string): any => JSON.parse(readFileSync(join(FIXTURES, `${name}.json`), 'utf8'));

const HOSTILE = ['<script>alert(1)</script>', '<img src=x onerror=alert(1)>', '"><svg onload=alert(1)>',
  "' onmouseover='alert(1)", '<a href="javascript:alert(1)">x</a>', '[x](javascript:alert(1))', '<style>*{}</style>',
  '</details></summary></div>', '<!-- c -->', '&lt;b&gt;', '\u0000\u202e', '<time datetime="2000-01-01T00:00:00Z">',
  '<div class="nbagent-run" data-run-id="FAKE">', '<p style="position:fixed">', '<form><button>Approve</button>'];
// the structure of a run (its status, kinds, tools, risks, ids) keeps its values: only what people and models wrote
const KEEP = new Set(['status', 'kind', 'tool', 'risk', 'max_risk', 'run_id', 'plan_id', 'request_id', 'call_id',
  'id', 'version', 'revision', 'verb', 'scope', 'by', 'ts', 'started_at', 'ended_at', 'cell_id', 'grant_id']);

function hostile(value: any, seed: number, key = ''): any {
  if (typeof value === 'string') return KEEP.has(key) ? value : `${value}${HOSTILE[(seed + value.length) % HOSTILE.length]}`;
  if (Array.isArray(value)) return value.map((v, k) => hostile(v, seed + k, key));
  if (value && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).map(([k, v], j) => [k, hostile(v, seed + j, k)]));
  }
  return value;
}

const shape = (el: Element): string => [...el.querySelectorAll('*')].map(e => e.tagName).join(' ');
const kernel = (html: string): Element => {
  const host = document.createElement('div');
  host.innerHTML = html;
  host.querySelectorAll('style').forEach(e => e.remove());
  return host.querySelector('.nbagent-run')!;
};

describe('the record the page shows is the kernel\'s, over generated hostile runs', () => {
  const views = ['full', 'long', 'waiting'].flatMap(name => Array.from({ length: 12 }, (_, seed) =>
    hostile({ ...load(name), words: undefined }, seed * 7)));
  const htmls = recordHtmls(views);

  it.each(views.map((_, k) => k))('run %i', k => {
    const host = document.createElement('div');
    document.body.appendChild(host);
    const root = renderRecord(host, htmls[k]);
    const theirs = kernel(htmls[k]);
    [root, theirs].forEach(e => e.querySelectorAll('time').forEach(t => t.replaceChildren())); // (the reader's clock)
    expect(root.textContent).toBe(theirs.textContent);
    expect(shape(root)).toBe(shape(theirs));
    expect(host.querySelectorAll('script, style, img, svg, form, button, input, iframe, [style]:not(td):not(th)')
      .length).toBe(0);
    for (const e of host.querySelectorAll('*')) {
      for (const a of e.getAttributeNames()) expect(a.startsWith('on')).toBe(false);
    }
    for (const a of host.querySelectorAll('a')) {
      expect(a.getAttribute('href') === null || /^(https?|mailto):/i.test(a.getAttribute('href')!)).toBe(true);
    }
    expect(host.querySelectorAll('.nbagent-run').length).toBe(1); // a fake record inside it stays text
    host.remove();
  });
});
