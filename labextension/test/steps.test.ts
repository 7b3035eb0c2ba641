import { readFileSync } from 'fs';
import { join } from 'path';

import { describe, expect, it } from 'vitest';

// @ts-expect-error: the committed bundle, as the widget and the lab extension load it
import live, { renderRecord } from '../../nbagent/ui/run_view.js';
import { recordHtml } from './kernel_record';

// Each step says what it did (issue 46): the view the kernel builds (nbagent/ui/viewstate.py, its sentences from
// nbagent/ui/step_words.py) carries each tool step's `outcome`; the live view and the record the lab extension shows
// (the kernel's text/html, tests/test_step_outcomes.py checks it in Python too) show it after the step's icon. A cell
// that raised is ✗, one interrupted ■, never ✓ ok.
const view = JSON.parse(readFileSync(join(__dirname, 'steps', 'outcomes.json'), 'utf8'));

function drawStatic(v: any): Element {
  const host = document.createElement('div');
  document.body.appendChild(host);
  return renderRecord(host, recordHtml(v));
}

function drawLive(v: any): Element {
  const el = document.createElement('div');
  document.body.appendChild(el);
  const state: Record<string, unknown> = { view: v, streaming: '', decided: '' };
  live.render({ model: { get: (k: string) => state[k], set: () => undefined, save_changes: () => undefined,
    send: () => undefined, on: () => undefined, off: () => undefined }, el });
  return el;
}

// "✗ raised KeyError: …": the step's icon (a column of its own), then its line
const squash = (t: string | null | undefined) => (t || '').replace(/\s+/g, ' ').trim();
const lines = (root: Element) => [...root.querySelectorAll('li.nbv-k-tool > .nbv-line')]
  .map(l => `${squash(l.querySelector('.nbv-icon')!.textContent)} ${squash(l.querySelector('.nbv-main')!.textContent)}`);
// the record's line (record_html.py): the icon, then the sentence, the call; its risk badge's [brackets] show only
// where styles are stripped
const recordLines = (root: Element) => [...root.querySelectorAll('li.nbr-k-tool > .nbr-line')].map(l => {
  const c = l.cloneNode(true) as Element;
  c.querySelectorAll('.nbr-sep').forEach(e => e.remove());
  return squash(c.textContent);
});

describe('the record', () => {
  it('says a cell raised, was interrupted, or what it showed, after the step\'s icon', () => {
    const root = drawStatic(view);
    const [raised, stopped, clean] = recordLines(root);
    expect(raised.startsWith("✗ raised KeyError: 'Revenue' · run_cell(")).toBe(true);
    expect(raised).not.toContain('ok');
    expect(stopped.startsWith('■ interrupted after 4.6 s · run_cell(')).toBe(true);
    expect(clean.startsWith('✓ ran [6]: printed 3 lines, showed a figure · run_cell(')).toBe(true);
    const items = [...root.querySelectorAll('li.nbr-k-tool')];
    expect(items.map(li => li.className.match(/nbr-st-(\w+)/)![1])).toEqual(['failed', 'interrupted', 'ok']);
  });

  it('keeps the traceback and the raw result behind disclosures, and the error the sentence does not say', () => {
    const root = drawStatic(view);
    const [raised, stopped] = [...root.querySelectorAll('li.nbr-k-tool')];
    const summaries = (li: Element) => [...li.querySelectorAll('details > summary')].map(s => s.textContent);
    expect(summaries(raised)).toEqual(['traceback (its end)', 'result']);
    expect(raised.querySelector('details pre.nbr-traceback')!.textContent).toContain("KeyError: 'Revenue'");
    expect(raised.querySelector('.nbr-why')).toBeNull(); // "KeyError: 'Revenue'" is the sentence already
    expect(stopped.querySelector('.nbr-why')!.textContent).toContain('the kernel was interrupted');
    for (const d of root.querySelectorAll('li.nbr-k-tool details')) expect((d as HTMLDetailsElement).open).toBe(false);
  });

  it('says the run completed with errors, and why', () => {
    const root = drawStatic(view);
    expect(root.querySelector('.nbr-title .nbr-badge')!.textContent).toBe('[⚠ completed with errors]');
    expect(root.querySelector('.nbr-banner strong')!.textContent).toContain('1 tool call failed and 1 cell was interrupted');
    expect([...root.querySelectorAll('.nbr-errors li')].map(li => li.textContent))
      .toEqual(["run_cell: raised KeyError: 'Revenue'", 'run_cell: interrupted after 4.6 s']);
  });
});

describe.each([['the live view', drawLive]])('%s', (_name, draw) => {
  it('says a cell raised, was interrupted, or what it showed, after the step\'s icon', () => {
    const root = draw(view);
    const [raised, stopped, clean] = lines(root);
    expect(raised.startsWith("✗ raised KeyError: 'Revenue' · run_cell(")).toBe(true);
    expect(raised).not.toContain('ok');
    expect(stopped.startsWith('■ interrupted after 4.6 s · run_cell(')).toBe(true);
    expect(clean.startsWith('✓ ran [6]: printed 3 lines, showed a figure · run_cell(')).toBe(true);
    const items = [...root.querySelectorAll('li.nbv-k-tool')];
    expect(items.map(li => li.className.match(/nbv-st-(\w+)/)![1])).toEqual(['failed', 'interrupted', 'ok']);
  });

  it('keeps the traceback and the raw result behind disclosures, and the error the sentence does not say', () => {
    const root = draw(view);
    const [raised, stopped] = [...root.querySelectorAll('li.nbv-k-tool')];
    const summaries = (li: Element) => [...li.querySelectorAll('details > summary')].map(s => s.textContent);
    expect(summaries(raised)).toEqual(['traceback (its end)', 'result']);
    expect(raised.querySelector('details pre.nbv-traceback')!.textContent).toContain("KeyError: 'Revenue'");
    expect(raised.querySelector('.nbv-why')).toBeNull(); // "KeyError: 'Revenue'" is the sentence already
    expect(stopped.querySelector('.nbv-why')!.textContent).toContain('the kernel was interrupted');
    for (const d of root.querySelectorAll('li.nbv-k-tool details')) expect((d as HTMLDetailsElement).open).toBe(false);
  });

  it('says the run completed with errors, and why', () => {
    const root = draw(view);
    expect(root.querySelector('.nbv-status')!.textContent).toBe('⚠ completed with errors');
    expect([...root.querySelectorAll('.nbv-errors li')].map(li => li.textContent))
      .toEqual(["run_cell: raised KeyError: 'Revenue'", 'run_cell: interrupted after 4.6 s']);
  });
});

describe('a view saved without sentences', () => {
  it('keeps the generic form of its steps', () => {
    const old = JSON.parse(JSON.stringify(view));
    for (const s of old.steps) {
      delete s.outcome;
      delete s.traceback;
      if (s.kind === 'tool') s.status = 'ok';
    }
    const [first] = recordLines(drawStatic(old));
    expect(first.startsWith('✓ tool run_cell(')).toBe(true);
    expect(drawStatic(old).querySelector('li.nbr-k-tool .nbr-kind')!.textContent).toBe('tool');
    const [live] = lines(drawLive(old));
    expect(live.startsWith('✓ run_cell(')).toBe(true);
  });
});
