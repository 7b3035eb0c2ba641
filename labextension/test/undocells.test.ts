import { readFileSync } from 'fs';
import { join } from 'path';

import { Widget } from '@lumino/widgets';
import { afterEach, describe, expect, it } from 'vitest';

import { MIME_TYPE, rendererFactory } from '../src/index';
import { UndoOffers } from '../src/undo';

// @ts-expect-error: the committed bundle, as the widget and the lab extension load it
import live, { renderRecord } from '../../nbagent/ui/run_view.js';
import { recordHtml } from './kernel_record';

// Cells are first-class effects (issue 46). A run that only wrote cells had Effects that said "effects not tracked
// file by file", no "↶ Undo" line (so no Undo… until a kernel answered), an Undo panel that said "it changed 1 file"
// and "Each file goes back …", and, once undone, a record saying "the files this run changed were put back". The
// views here are the pipeline's (tests/test_undo.py writes them with NBAGENT_WRITE_FIXTURES=1): a run that added
// [1] and [2], the person's edit of [2], and its undo, which removed [1] and kept [2].
const fx = JSON.parse(readFileSync(join(__dirname, 'undocells', 'views.json'), 'utf8'));

const attached: Widget[] = [];
afterEach(() => {
  attached.splice(0).forEach(w => w.isAttached && Widget.detach(w));
  document.body.replaceChildren();
});

// the record as the page shows it: the kernel's HTML (nbagent/ui/record_html.py) through the record's sanitiser
function draw(view: any): Element {
  const host = document.createElement('div');
  document.body.appendChild(host);
  return renderRecord(host, recordHtml(view));
}

const text = (el: Element | null) => (el ? el.textContent : null);
const withoutWords = (view: any) => ({ ...view, words: undefined });

describe('a run that wrote cells', () => {
  it('lists each cell in its Effects as the person sees it, and offers its undo', () => {
    for (const view of [fx.run, withoutWords(fx.run)]) {
      const root = draw(view);
      const items = [...root.querySelectorAll('.nbr-effects li')].map(li => li.textContent);
      expect(items).toEqual(['added [1] a = 1', 'added [2] b = 2',
        "what these cells' code did (variables, files it wrote) is not tracked here, nor undone by an undo"]);
      expect(root.querySelector('.nbr-effects')!.getAttribute('data-cells')).toBe('2');
      expect(root.textContent).not.toContain('file by file');
      expect(text(root.querySelector('.nbr-undo'))).toBe(
        `↶ Undo %agent undo ${fx.run.run_id} undoes this run's changes (2 cells)`);
    }
  });

  it("offers Undo… on its record before any kernel answered, as a file-changing run's does", async () => {
    const renderer = rendererFactory.createRenderer({ mimeType: MIME_TYPE } as any) as any;
    await renderer.renderModel({ trusted: false, data: { [MIME_TYPE]: fx.run, 'text/html': recordHtml(fx.run) }, metadata: {}, setData: () => undefined });
    Widget.attach(renderer, document.body);
    attached.push(renderer);
    const offer = renderer.node.querySelector('.nbr-undo .nbr-undo-offer') as HTMLButtonElement;
    expect(offer.textContent).toBe('Undo…');
    expect(offer.title).toContain(`%agent undo ${fx.run.run_id}`);
  });

  it('once undone, says what the undo did to each cell, and nothing of files', () => {
    const root = draw(fx.undone);
    const banner = text(root.querySelector('.nbr-banner[data-undone-by]'))!;
    const note: string = fx.undone.words.undo_note;
    expect(banner).toBe(`↶ ${note[0].toUpperCase()}${note.slice(1)}`); // (the kernel's words, as the view carries them)
    expect(banner).toContain('cell [1] a = 1 removed; [2] b = 2 kept: you edited it since; it is yours');
    expect(banner).toContain('does not bring cells back');
    expect(banner).not.toMatch(/files? this run changed/);
    expect(text([...root.querySelectorAll('h4.nbr-section')].find(h => h.textContent!.startsWith('Effects')) ?? null)).toBe(
      `Effects — undone since by undo run ${fx.undone.undone_by}`);
    expect(root.querySelector('.nbr-undo')).toBeNull();
  });

  it("the undo run's own Effects name the cell it removed and the one it kept", () => {
    const items = [...draw(fx.undo_run).querySelectorAll('.nbr-effects li')].map(li => li.textContent);
    expect(items).toEqual(['kept [2] b = 2', 'removed [1] a = 1']);
  });
});

// the Undo panel (the widget `%agent undo RUN` shows), on a model holding the kernel's offer, then its result
function panel(offer: any) {
  const state: Record<string, unknown> = { offer, result: {} };
  const handlers: Record<string, () => void> = {};
  const sent: any[] = [];
  const el = document.createElement('div');
  document.body.appendChild(el);
  const model = {
    get: (k: string) => state[k], set: () => undefined, save_changes: () => undefined,
    send: (m: unknown) => sent.push(m), on: (e: string, fn: () => void) => (handlers[e] = fn), off: () => undefined
  };
  live.render({ model, el });
  const set = (k: string, v: unknown) => {
    state[k] = v;
    handlers[`change:${k}`]?.();
  };
  return { el, sent, set };
}

describe('the Undo panel of a run that wrote cells', () => {
  it('counts cells, lists a kept cell as no change, and words the question by what changes', () => {
    const { el, sent, set } = panel(fx.offer);
    expect(text(el.querySelector('.nbv-undo-head'))).toBe(`Undo run ${fx.offer.run_id} · it changed 2 cells`);
    (el.querySelector('.nbv-btn') as HTMLButtonElement).click(); // "Undo": asks first
    expect(text(el.querySelector('.nbv-decide-q'))).toBe(fx.offer.question);
    expect(text(el.querySelector('.nbv-decide-q'))).not.toContain('Each file');
    const rows = [...el.querySelectorAll('.nbv-undo-list li')];
    expect(rows.map(li => li.textContent)).toEqual(['[2] b = 2 — kept: you edited it since; it is yours',
      '[1] a = 1 — removed (the agent added it)']);
    expect(rows[0].classList.contains('nbv-undo-kept')).toBe(true);
    const confirm = el.querySelector('.nbv-approve') as HTMLButtonElement;
    expect(confirm.textContent).toBe('Undo 1 change');
    confirm.click();
    expect(sent.filter(m => m.event === 'undo')).toHaveLength(1);
    set('result', fx.result);
    const done = el.querySelector('.nbv-undo-done')!;
    expect(text(done.querySelector('.nbv-undo-title'))).toBe(
      `✓ undone ${fx.result.said} (undo run ${fx.result.undo_run_id})`);
    expect(text(done.querySelector('.nbv-hint'))).toBe(fx.result.hint);
    expect(text(done.querySelector('.nbv-hint'))).toContain('the cells do not come back');
    expect([...done.querySelectorAll('li')].map(li => li.textContent)).toEqual([
      '[2] b = 2 — kept: you edited it since; it is yours', '[1] a = 1 — removed (the agent added it)']);
  });
});

// the kernel is told of no deletion: the undo plugin says which cells the notebook holds (undo.ts), when nbagent
// opens its comm and whenever the cells change, so an undo says a deleted cell was deleted (tests/test_undo_offers.py)
describe('the undo plugin tells the kernel which cells the notebook holds', () => {
  it('when nbagent opens its comm, and after each change of the cells', async () => {
    const listeners: (() => void)[] = [];
    const ids = ['setup', 'agent', 'a', 'b'];
    const cells = {
      get length() {
        return ids.length;
      },
      get: (i: number) => ({ id: ids[i] }),
      changed: { connect: (fn: () => void) => (listeners.push(fn), true) }
    };
    const targets = new Map<string, (comm: any, msg: unknown) => void>();
    const kernel = { registerCommTarget: (name: string, cb: any) => targets.set(name, cb) };
    const node = document.createElement('div');
    document.body.appendChild(node);
    const panel = { node, content: { model: { cells } }, sessionContext: { session: { kernel } } };
    const offers = new UndoOffers(() => [panel]);
    offers.watch(panel);
    listeners.forEach(fn => fn()); // a change before nbagent is loaded: nobody to tell
    const sent: unknown[] = [];
    targets.get('nbagent.undo')!({ send: (d: unknown) => sent.push(d), onMsg: null, onClose: null }, {});
    expect(sent).toEqual([{ cells: ['setup', 'agent', 'a', 'b'] }]);
    ids.splice(3, 1); // the person deletes b's cell
    listeners.forEach(fn => fn());
    expect(sent).toEqual([{ cells: ['setup', 'agent', 'a', 'b'] }, { cells: ['setup', 'agent', 'a'] }]);
    expect(listeners).toHaveLength(1); // followed once, however often the comm opens
  });
});
