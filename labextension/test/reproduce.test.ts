import { readFileSync } from 'fs';
import { join } from 'path';

import { Widget } from '@lumino/widgets';
import { afterEach, describe, expect, it } from 'vitest';

import { MIME_TYPE, RunRecordRenderer, rendererFactory } from '../src/index';
import { REPRODUCE_EVENT, recordedRuns, reproduceOn, reproducible } from '../src/reproduce';
import type { IRunView } from '../src/view';
import { recordHtml } from './kernel_record';

// Issue 46: a finished run's record is one click from being reproduced (its cell re-run from the log), and a
// reproduced run's record says which run it reproduced.

const FIXTURES = process.env.NBAGENT_VIEW_FIXTURES || join(__dirname, 'fixtures');
const full = (): IRunView => ({ ...JSON.parse(readFileSync(join(FIXTURES, 'full.json'), 'utf8')), cell_id: 'c1' });

const attached: Widget[] = [];
afterEach(() => {
  attached.splice(0).forEach(w => w.isAttached && Widget.detach(w));
  document.body.replaceChildren();
});

async function record(view: IRunView): Promise<RunRecordRenderer> {
  const renderer = rendererFactory.createRenderer({ mimeType: MIME_TYPE } as any) as RunRecordRenderer;
  await renderer.renderModel({ trusted: false, data: { [MIME_TYPE]: view, 'text/html': recordHtml(view) }, metadata: {}, setData: () => undefined } as any);
  Widget.attach(renderer, document.body);
  attached.push(renderer);
  return renderer;
}

describe('Reproduce on a record', () => {
  it('is offered for a finished run of a cell, and a click asks the page to reproduce that run there', async () => {
    const view = { ...full(), status: 'completed' };
    const r = await record(view);
    const button = r.node.querySelector('button.nbr-reproduce-button') as HTMLButtonElement;
    expect(button.textContent).toBe('Reproduce');
    const asked: unknown[] = [];
    const listener = (event: Event): void => {
      const detail = (event as CustomEvent).detail;
      asked.push({ run_id: detail.run_id, cell_id: detail.cell_id });
      detail.done('reproducing', true);
    };
    document.addEventListener(REPRODUCE_EVENT, listener);
    button.click();
    document.removeEventListener(REPRODUCE_EVENT, listener);
    expect(asked).toEqual([{ run_id: view.run_id, cell_id: 'c1' }]);
    expect(button.disabled).toBe(true);
  });

  it('says so when nothing on the page can reproduce it', async () => {
    const r = await record({ ...full(), status: 'completed' });
    const button = r.node.querySelector('button.nbr-reproduce-button') as HTMLButtonElement;
    button.click();
    expect(r.node.querySelector('.nbr-reproduce-status')?.textContent).toContain('%agent reproduce');
    expect(button.disabled).toBe(false);
  });

  it('is not offered where nothing recorded can be played back', () => {
    for (const status of ['running', 'waiting', 'failed', 'interrupted']) {
      expect(reproducible({ ...full(), status })).toBe(false);
    }
    expect(reproducible({ ...full(), status: 'completed', cell_id: null })).toBe(false); // (no cell to re-run)
    expect(reproducible({ ...full(), status: 'completed', parent_run_id: 'P' })).toBe(false); // a sub-agent's
    expect(reproducible({ ...full(), status: 'completed', undoes: { run_id: 'U' } })).toBe(false); // an undo
    expect(reproducible({ ...full(), status: 'completed_with_errors' })).toBe(true);
  });

  it("a reproduced run's record names the run it reproduced", async () => {
    const view = full();
    delete (view.words as Record<string, unknown> | undefined)?.reproduced; // (the kernel's words are the fixture run's)
    const r = await record({ ...view, status: 'completed', reproduces: '01ABCDEFGHJKMNPQRSTVWXYZ00' });
    expect(r.node.querySelector('.nbr-reproduced')?.textContent)
      .toBe('↻ Reproduced run 01ABCDEFGHJK from the log: no model call, the recorded decisions');
  });
});

describe('Reproduce all', () => {
  const cell = (id: string, ...views: object[]) => ({
    id, outputs: { length: views.length, get: (i: number) => ({ toJSON: () => ({ data: { [MIME_TYPE]: views[i] } }) }) }
  });

  it("binds each cell's next run to the run its own record names", () => {
    const cells = [
      cell('a', { ...full(), cell_id: 'a', run_id: 'R1', status: 'completed' }),
      cell('b', { ...full(), cell_id: 'elsewhere', run_id: 'R2', status: 'completed' }), // a record copied here
      cell('c', { ...full(), cell_id: 'c', run_id: 'R3', status: 'waiting' }),
      cell('d', { ...full(), cell_id: 'd', run_id: 'R4', status: 'completed' },
        { ...full(), cell_id: 'd', run_id: 'R5', status: 'completed_with_errors' })
    ];
    const runs = recordedRuns({ length: cells.length, get: (i: number) => cells[i] });
    expect(runs).toEqual({ a: 'R1', d: 'R5' });
    expect(reproduceOn(runs)).toBe(
      "__import__('nbagent.ipython.reproduce', fromlist=['_']).turn_on(get_ipython(), {'a': 'R1', 'd': 'R5'})");
    expect(reproduceOn({ "x'); import os; ('": 'R1' })).toContain('turn_on(get_ipython(), {})'); // ids only
  });
});
