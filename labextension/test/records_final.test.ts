import { afterEach, describe, expect, it, vi } from 'vitest';

import { onFinal, RUN_MIME } from '../src/records';

const WIDGET = 'application/vnd.jupyter.widget-view+json';

/** One cell whose output 0 shows a live view (widget model `model`), in a fake app's notebook. */
function page(model: string) {
  const items: any[] = [{ output_type: 'display_data', data: { [WIDGET]: { model_id: model } } }];
  const outputs = { get length() { return items.length; }, get: (i: number) => ({ toJSON: () => items[i] }),
                    set: (i: number, v: any) => { items[i] = v; } };
  const cellNode = document.createElement('div');
  const child = document.createElement('div');
  const view = document.createElement('div');
  child.appendChild(view);
  cellNode.appendChild(child);
  document.body.appendChild(cellNode);
  const cell = { node: cellNode, model: { outputs }, outputArea: { node: cellNode, widgets: [{ node: child }] } };
  const app = { shell: { widgets: () => [{ content: { widgets: [cell] } }] } } as any;
  const ended = (runId: string) => {
    const event = new CustomEvent('nbagent-run-final', { detail: { view: { run_id: runId, status: 'completed' },
      bundle: { 'text/plain': 'record' } } });
    Object.defineProperty(event, 'target', { value: view });
    onFinal(app, event);
  };
  return { items, ended };
}

describe('an ended live view becomes its record', () => {
  afterEach(() => vi.useRealTimers());

  it('replaces that very view', () => {
    vi.useFakeTimers();
    const p = page('w1');
    p.ended('R1');
    vi.advanceTimersByTime(2000);
    expect(p.items[0].data[RUN_MIME].run_id).toBe('R1');
  });

  it('leaves the next run\'s live view of a cell run again meanwhile (its cards wait there)', () => {
    vi.useFakeTimers();
    const p = page('w1');
    p.ended('R1');
    p.items[0] = { output_type: 'display_data', data: { [WIDGET]: { model_id: 'w2' } } }; // the cell ran again
    vi.advanceTimersByTime(2000);
    expect(p.items[0].data[WIDGET].model_id).toBe('w2');
  });
});
