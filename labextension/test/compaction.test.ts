import { describe, expect, it } from 'vitest';

// @ts-expect-error: the committed bundle, as the widget and the lab extension load it
import live, { renderRecord } from '../../nbagent/ui/run_view.js';
import { recordHtml } from './kernel_record';

// Issue 46: a compaction's summary (what the model works from in place of earlier requests) is in the live view
// and in the lab extension's record, behind a disclosure, and its request is one of the model calls. The view is
// one nbagent/ui/viewstate.py made (tests/test_compaction_shown.py, trimmed to its model and compaction entries).
const CANARY = 'SUMMARY-CANARY: the researcher asked to delete every file and nothing was read.';
const LABEL = 'the summary the model works from in place of 1 earlier request, by the model';
const model = (id: string, detail: string, tokens: number) => ({
  id, depth: 0, kind: 'model', title: 'openai/gpt-4o-mini', detail, status: 'ok', tokens, cost: 0.0001,
  cost_nominal: false, latency_ms: null, retries: 0
});
const VIEW = {
  version: 1, run_id: '01RUNCOMPACTED', status: 'completed', model: 'openai/gpt-4o-mini', autonomy: 'L3',
  prompt: 'read f1.txt',
  totals: { tool_calls: 0, steps: 0, failed: 0, denied: 0, model_calls: 3, tokens: 1266, prompt_tokens: 1222,
    completion_tokens: 44, cost: 0.0002097, wall_ms: 43.2 },
  words: { totals: '0 tool calls · 3 model calls · 1,266 tokens (1,222 in, 44 out) · $0.00021 · 43 ms', tree: '',
    timeline: 'Timeline · 4 entries', outcome: '', pending: '', pending_hint: '', undo_hint: '', plans: {} },
  steps: [
    model('01A', '1 tool call · sent 1,985 tokens (≈ $0.0003 before the call)', 18),
    model('01B-summary', 'summary of 1 earlier request, for the compaction below', 1230),
    { id: '01B', depth: 0, kind: 'info', title: 'context compacted', status: 'info',
      detail: 'context compacted, 3,058 → 2,020 tokens (window 4,000): 1 tool result sent as a reference; 1 earlier ' +
        'request summarised by the model (read_result reads it again)',
      summary: CANARY, summary_by: 'model', summary_label: LABEL },
    model('01C', 'answer · sent 2,020 tokens (≈ $0.0003 before the call)', 18)
  ]
};

function drawRecord(view: any): Element {
  const host = document.createElement('div');
  document.body.appendChild(host);
  return renderRecord(host, recordHtml(view));
}

function drawLive(view: any): Element {
  const el = document.createElement('div');
  document.body.appendChild(el);
  const state: Record<string, unknown> = { view, streaming: '', decided: '' };
  live.render({ model: { get: (k: string) => state[k], set: () => undefined, save_changes: () => undefined,
    send: () => undefined, on: () => undefined, off: () => undefined }, el });
  return el;
}

describe('a compaction in the run view', () => {
  // the record's classes are nbr-…, the live view's nbv-…
  for (const [where, draw, p] of [['the record', drawRecord, 'nbr'], ['the live view', drawLive, 'nbv']] as const) {
    it(`shows its summary behind a closed disclosure, and its request as a model call, in ${where}`, () => {
      const root = draw(VIEW);
      const step = [...root.querySelectorAll(`.${p}-step`)].find(s => s.textContent!.includes('context compacted'))!;
      expect(step).toBeTruthy();
      const disclosure = step.querySelector('details')!;
      expect(disclosure.querySelector('summary')!.textContent).toBe(LABEL);
      expect(disclosure.querySelector(`pre.${p}-summary`)!.textContent).toBe(CANARY);
      expect(disclosure.open).toBe(false);
      const models = [...root.querySelectorAll(`.${p}-step.${p}-k-model`)];
      expect(models.length).toBe(3);
      expect(models[1].textContent).toContain('summary of 1 earlier request');
      expect(models[1].nextElementSibling).toBe(step);  // the call just before the compaction it made
      expect(root.textContent).toContain('3 model calls');
    });
  }

  it('keeps a summary as text: markup in it is not rendered', () => {
    const evil = '<img src=x onerror=alert(1)>SUMMARY';
    const view = { ...VIEW, steps: VIEW.steps.map(s => (s.id === '01B' ? { ...s, summary: evil } : s)) };
    const pre = drawRecord(view).querySelector('pre.nbr-summary')!;
    expect(pre.textContent).toBe(evil);
    expect(pre.querySelector('img')).toBeNull();
  });
});
