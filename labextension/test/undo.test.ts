import { readFileSync } from 'fs';
import { join } from 'path';

import { Widget } from '@lumino/widgets';
import { afterEach, describe, expect, it } from 'vitest';

import { answerUndo } from '../src/cells';
import { MIME_TYPE, RunRecordRenderer, rendererFactory, showOffer } from '../src/index';
import { IComm, IUndoKernel, IUndoOffer, UndoOffers } from '../src/undo';
import { UNDO_ASK_EVENT, UNDO_EVENT } from '../src/view';
import type { IRunView } from '../src/view';
import { recordHtml } from './kernel_record';

// Issue 45: a record's Undo… was drawn for any run id a saved record holds, and a click could then do nothing.
// Now the button is drawn only where the notebook's kernel says undo can act, and a click always says what came of it.

const FIXTURES = process.env.NBAGENT_VIEW_FIXTURES || join(__dirname, 'fixtures');
const full = (): IRunView => JSON.parse(readFileSync(join(FIXTURES, 'full.json'), 'utf8'));

const attached: Widget[] = [];
const listening: ((event: Event) => void)[] = [];
afterEach(() => {
  attached.splice(0).forEach(w => w.isAttached && Widget.detach(w));
  listening.splice(0).forEach(fn => document.removeEventListener(UNDO_ASK_EVENT, fn));
  document.body.replaceChildren();
});

/** A record rendered and attached as JupyterLab does it (render first, then attach). */
async function record(view: IRunView, host: HTMLElement = document.body): Promise<RunRecordRenderer> {
  const renderer = rendererFactory.createRenderer({ mimeType: MIME_TYPE } as any) as RunRecordRenderer;
  await renderer.renderModel({ trusted: false, data: { [MIME_TYPE]: view, 'text/html': recordHtml(view) }, metadata: {}, setData: () => undefined } as any);
  Widget.attach(renderer, host);
  attached.push(renderer);
  return renderer;
}

/** Answer every record's ask with `offer` (what the undo plugin does with the kernel's answer). */
function answering(offer: IUndoOffer | null): string[] {
  const asked: string[] = [];
  const listener = (event: Event): void => {
    const detail = (event as CustomEvent).detail;
    asked.push(detail.run_id);
    detail.answer(offer);
  };
  document.addEventListener(UNDO_ASK_EVENT, listener);
  listening.push(listener);
  return asked;
}

// the record's undo buttons (Reproduce, reproduce.test.ts, is beside them on a finished run's record)
const buttons = (node: Element) =>
  [...node.querySelectorAll('button')].map(b => b.textContent).filter(t => t !== 'Reproduce');

describe("a record's Undo…", () => {
  it('asks until a kernel says: a click loads nbagent and runs the undo below, which checks the log', async () => {
    const view = full();
    const node = (await record(view)).node;
    expect(node.querySelector('.nbr-undo')!.textContent).toContain(`%agent undo ${view.run_id}`);
    expect(buttons(node)).toEqual(['Undo…']);
    expect(node.querySelector('button')!.title).toContain('nbagent is loaded in the kernel first');
  });

  it('is not drawn for a record that names no change while no kernel has said', async () => {
    const view = full();
    const node = (await record(view)).node;
    node.querySelector('.nbr-undo')!.remove();
    showOffer(node as HTMLElement, String(view.run_id), null);
    expect(buttons(node)).toEqual([]);
  });

  it('is drawn where the kernel says undo can act, and a click says where the Undo panel is', async () => {
    const view = full();
    const asked = answering({ undo: true, line: 'x', title: 'insert and run it below' });
    const node = (await record(view)).node;
    expect(asked).toEqual([view.run_id]);
    const button = node.querySelector('.nbr-undo .nbr-undo-offer') as HTMLButtonElement;
    expect(button.textContent).toBe('Undo…');
    expect(button.title).toBe('insert and run it below');
    const clicks: string[] = [];
    const onClick = (event: Event): void => {
      const detail = (event as CustomEvent).detail;
      clicks.push(detail.run_id);
      detail.done('↓ in the new cell below', true);
    };
    document.addEventListener(UNDO_EVENT, onClick);
    button.click();
    document.removeEventListener(UNDO_EVENT, onClick);
    expect(clicks).toEqual([view.run_id]);
    expect(node.querySelector('.nbr-undo-status')!.textContent).toBe(' ↓ in the new cell below');
    expect(button.disabled).toBe(true); // one cell per click
  });

  it('says why not when nothing on the page can act on the click', async () => {
    answering({ undo: true, line: 'x' });
    const node = (await record(full())).node;
    (node.querySelector('.nbr-undo-offer') as HTMLButtonElement).click(); // no notebook plugin listening
    const status = node.querySelector('.nbr-undo-status')!;
    expect(status.textContent).toContain('nothing on this page can run it');
    expect(status.classList.contains('nbr-bad')).toBe(true);
  });

  it('is not drawn where the kernel says no, and the record says why beside its line', async () => {
    answering({ undo: false, why: "not in this notebook's log (nb.nbagent)" });
    const node = (await record(full())).node;
    expect(buttons(node)).toEqual([]);
    expect(node.querySelector('.nbr-undo .nbr-undo-why')!.textContent).toBe(
      " — not undoable here: not in this notebook's log (nb.nbagent)");
  });

  it('gets its line from the kernel for a run that changed only cells', async () => {
    const view = { ...full(), run_id: '01CELLS', steps: [], words: { ...full().words, undo_hint: '' } } as IRunView;
    answering({ undo: true, line: "%agent undo 01CELLS undoes this run's changes (1 cell)" });
    const node = (await record(view)).node;
    const hint = node.querySelector('.nbr-undo')!;
    expect(hint.querySelector('code')!.textContent).toBe('%agent undo 01CELLS');
    expect(hint.textContent).toContain("undoes this run's changes (1 cell)");
    expect(buttons(node)).toEqual(['Undo…']);
  });

  it('is not asked about for a run still going', async () => {
    const asked = answering({ undo: true });
    await record({ ...full(), status: 'waiting' });
    expect(asked).toEqual([]);
  });
});

// ------------------------------------------------------------------------------------- the kernel's answers

class FakeComm implements IComm {
  sent: any[] = [];
  onMsg: IComm['onMsg'] = null;
  onClose: IComm['onClose'] = null;
  send(data: unknown): void {
    this.sent.push(data);
  }
  reply(data: unknown): void {
    this.onMsg?.({ content: { data } });
  }
}

class FakeKernel implements IUndoKernel {
  targets = new Map<string, (comm: IComm, msg: unknown) => void>();
  private listeners: ((sender: unknown, status: string) => void)[] = [];
  statusChanged = { connect: (fn: (sender: unknown, status: string) => void) => (this.listeners.push(fn), true) };
  registerCommTarget(name: string, cb: (comm: IComm, msg: unknown) => void): void {
    this.targets.set(name, cb);
  }
  status(s: string): void {
    this.listeners.forEach(fn => fn(this, s));
  }
}

function page(): { panel: any; kernel: FakeKernel; offers: UndoOffers } {
  const kernel = new FakeKernel();
  const node = document.createElement('div');
  document.body.appendChild(node);
  const panel = { node, content: { model: {} }, sessionContext: { session: { kernel } } };
  const offers = new UndoOffers(() => [panel]);
  offers.watch(panel);
  return { panel, kernel, offers };
}

const tick = () => new Promise(resolve => setTimeout(resolve, 0));

describe('the undo plugin', () => {
  it('asks the kernel once nbagent opened its comm, in one message, and answers each record', async () => {
    const { panel, kernel, offers } = page();
    const got: Record<string, IUndoOffer | null> = {};
    const records = ['01A', '01B'].map(id => {
      const node = document.createElement('div');
      panel.node.appendChild(node);
      offers.ask(node, { run_id: id, answer: offer => (got[id] = offer) });
      return node;
    });
    expect(records).toHaveLength(2);
    const comm = new FakeComm();
    kernel.targets.get('nbagent.undo')!(comm, {});  // %load_ext nbagent ran
    await tick();
    expect(comm.sent.filter(m => 'ask' in m)).toEqual([{ id: 1, ask: ['01A', '01B'] }]); // (and the cell ids: undocells.test.ts)
    comm.reply({ id: 1, offers: { '01A': { undo: true, line: 'l' }, '01B': { undo: false, why: 'w' } } });
    expect(got).toEqual({ '01A': { undo: true, line: 'l' }, '01B': { undo: false, why: 'w' } });
    // a record re-rendered meanwhile takes only the answer to its latest ask
    let first = 0;
    let second = 0;
    offers.ask(records[0], { run_id: '01A', answer: () => first++ });
    await tick();
    offers.ask(records[0], { run_id: '01A', answer: () => second++ });
    await tick();
    comm.reply({ id: 2, offers: { '01A': { undo: true } } });
    comm.reply({ id: 3, offers: { '01A': { undo: true } } });
    expect([first, second]).toEqual([0, 1]);
    // the kernel restarts: what it said no longer stands
    kernel.status('restarting');
    expect(got['01B']).toBeNull();
  });

  it('answers nothing for a record outside the notebooks, and nothing before nbagent is loaded', async () => {
    const { panel, kernel, offers } = page();
    const called: unknown[] = [];
    const inside = document.createElement('div');
    panel.node.appendChild(inside);
    offers.ask(inside, { run_id: '01A', answer: o => called.push(o) });
    const outside = document.createElement('div');
    document.body.appendChild(outside);
    offers.ask(outside, { run_id: '01Z', answer: o => called.push(o) });
    await tick();
    expect(called).toEqual([]);
    const comm = new FakeComm();
    kernel.targets.get('nbagent.undo')!(comm, {});
    await tick();
    expect(comm.sent.filter(m => 'ask' in m)).toEqual([{ id: 1, ask: ['01A'] }]);
  });
});

describe('a click on Undo…', () => {
  const click = (target: EventTarget, runId: unknown) => {
    const said: [string, boolean][] = [];
    const event = new CustomEvent(UNDO_EVENT, { detail: { run_id: runId, done: (t: string, ok: boolean) => said.push([t, ok]) } });
    Object.defineProperty(event, 'target', { value: target });
    return { event, said };
  };

  it('says why not when the record is in no notebook of the page, or the run id is not one', () => {
    const app = { shell: { widgets: () => [] } };
    const lone = document.createElement('div');
    let { event, said } = click(lone, '01ABC');
    answerUndo(app as any, event as any);
    expect(said).toEqual([['not undone from here: this record is not in a notebook cell of this page; run '
      + '%agent undo 01ABC in its notebook', false]]);
    ({ event, said } = click(lone, '../x'));
    answerUndo(app as any, event as any);
    expect(said[0][1]).toBe(false);
    expect(said[0][0]).toContain('is not a run id');
  });
});
