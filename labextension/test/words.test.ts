import { readdirSync, readFileSync } from 'fs';
import { join } from 'path';

import { describe, expect, it } from 'vitest';

// @ts-expect-error: the committed bundle, as the widget and the lab extension load it
import live, { renderRecord } from '../../nbagent/ui/run_view.js';
import { recordHtml } from './kernel_record';

// The words and numbers a run shows have one source: nbagent/ui/record_words.py, which writes the saved record and
// puts them in the view (`view.words`). On the same runs (the pipeline's views when pytest runs this, see
// tests/test_labextension.py, else the committed fixtures) the record the lab extension shows (the kernel's HTML)
// and the live view must say exactly those words: the live view with `view.words`, and with a view saved before
// views carried them (the JS fallback).
const FIXTURES = process.env.NBAGENT_VIEW_FIXTURES || join(__dirname, 'fixtures');
const names = readdirSync(FIXTURES).filter(f => f.endsWith('.json')).map(f => f.slice(0, -5));

interface IWords {
  totals: string; tree: string; timeline: string; outcome: string; pending: string; pending_hint: string;
  undo_hint: string; plans: Record<string, string>;
}

function draw(view: any): Element {
  const host = document.createElement('div');
  document.body.appendChild(host);
  return renderRecord(host, recordHtml(view));
}

const upperFirst = (t: string) => (t ? t[0].toUpperCase() + t.slice(1) : t);
const text = (el: Element | null) => (el ? el.textContent : null);

const startingWith = (root: Element, sel: string, start: string) =>
  text([...root.querySelectorAll(sel)].find(e => e.textContent!.startsWith(start)) ?? null);

function saysTheWords(root: Element, view: any, words: IWords): void {
  expect(text(root.querySelector('.nbr-foot > span'))).toBe(`Totals ${words.totals}`);
  expect(startingWith(root, '.nbr-foot > span', 'Run tree')).toBe(words.tree ? `Run tree ${words.tree}` : null);
  if ((view.steps || []).length) expect(startingWith(root, 'h4.nbr-section', 'Timeline')).toBe(words.timeline);
  expect(startingWith(root, '.nbr-banner strong', '⚠')).toBe(words.outcome ? `⚠ ${words.outcome}` : null);
  if (view.pending && !view.superseded_by) {
    const banner = [...root.querySelectorAll('.nbr-banner')].find(b => b.textContent!.startsWith('‖'))!;
    expect(text(banner.querySelector('strong'))).toBe(`‖ ${words.pending}`);
    expect(text(banner.querySelector('.nbr-hint'))).toBe(`in a new cell: ${words.pending_hint}`);
  }
  expect(text(root.querySelector('.nbr-undo'))).toBe(words.undo_hint ? `↶ Undo ${words.undo_hint}` : null);
  const plans = [...root.querySelectorAll('.nbr-plan[data-plan-id]')];
  expect(plans.length).toBe(Object.keys(words.plans).length);
  plans.forEach((card, k) => {
    const summary = words.plans[card.getAttribute('data-plan-id')!];
    expect(text(card.querySelector('.nbr-plan-head'))!.startsWith(`Plan ${k + 1}: ${upperFirst(summary)} `)).toBe(true);
  });
}

// the live widget (the anywidget default export) on a model that only holds the view
function drawLive(view: any): Element {
  const el = document.createElement('div');
  document.body.appendChild(el);
  const state: Record<string, unknown> = { view, streaming: '', decided: '' };
  live.render({ model: { get: (k: string) => state[k], set: () => undefined, save_changes: () => undefined,
    send: () => undefined, on: () => undefined, off: () => undefined }, el });
  return el;
}

function liveSaysTheWords(root: Element, view: any, words: IWords): void {
  expect(text(root.querySelector('.nbv-foot > span'))).toBe(`Totals ${words.totals}`);
  if ((view.steps || []).length) expect(text(root.querySelector('.nbv-section'))).toBe(words.timeline);
  for (const card of root.querySelectorAll('.nbv-plan[data-plan-id]')) {
    const summary = words.plans[card.getAttribute('data-plan-id')!];
    expect(text(card.querySelector('.nbv-plan-title'))!.replace(/^Plan( \d+)?: /, '')).toBe(upperFirst(summary));
  }
}

describe('the live view and the record say the same words', () => {
  it.each(names)('%s', name => {
    const view = JSON.parse(readFileSync(join(FIXTURES, `${name}.json`), 'utf8'));
    expect(view.words).toBeTruthy(); // the pipeline's views carry the record's words
    saysTheWords(draw(view), view, view.words);
    const { words, ...older } = view; // a record saved before views carried words: the JS words them the same way
    saysTheWords(draw(older), older, words);
    liveSaysTheWords(drawLive(view), view, view.words);
    liveSaysTheWords(drawLive(older), older, words);
  });
});

// @ts-expect-error: a plain .js module (the source of nbagent/ui/run_view.js)
import { fmtCost, fmtMs } from '../src/run_view/format.js';

describe('numbers, for views saved before they carried words', () => {
  // what nbagent/ui/record_words.py's fmt_ms and fmt_cost make of the same numbers (Python rounds a tie to even)
  it('are formatted as the record formats them', () => {
    const ms = [0.125, 0.5, 2.25, 2.35, 58.5, 59.5, 57.5, 999.5, 1250, 2250, 59950, 60500, 61500, 3599500, 7325000];
    expect(ms.map(fmtMs)).toEqual(['0.12 ms', '0.50 ms', '2.2 ms', '2.4 ms', '58 ms', '60 ms', '58 ms', '1000 ms',
      '1.2 s', '2.2 s', '60.0 s', '1 min 0 s', '1 min 2 s', '1 h 0 min', '2 h 2 min']);
    const cost = [0, 0.00001, 0.000012, 0.00012345, 0.0011, 0.01, 0.015, 0.125, 1234.5, 1234567.891];
    expect(cost.map(c => fmtCost(c))).toEqual(['$0', '$1.0e-05', '$1.2e-05', '$0.00012', '$0.0011', '$0.01', '$0.01',
      '$0.12', '$1,234.50', '$1,234,567.89']);
    expect(fmtCost(0.5, true)).toBe('$0.50 nominal');
    expect(fmtCost(null)).toBe('cost unknown');
  });
});
