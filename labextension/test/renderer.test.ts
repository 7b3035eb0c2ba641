import { readFileSync } from 'fs';
import { join } from 'path';

import { describe, expect, it } from 'vitest';

import extension, { MIME_TYPE, RECORD_CLASS, RunRecordRenderer, rendererFactory } from '../src/index';
import { approvalQuestion, approveLabel, denyLabel, planSummary } from '../src/view';
import type { IRunView } from '../src/view';

// Run views made by the Python pipeline: the committed ones, or fresh ones when the pytest suite runs this
// (tests/test_labextension.py sets NBAGENT_VIEW_FIXTURES).
const FIXTURES = process.env.NBAGENT_VIEW_FIXTURES || join(__dirname, 'fixtures');
const load = (name: string): IRunView => JSON.parse(readFileSync(join(FIXTURES, `${name}.json`), 'utf8'));
// a view changed by hand: its `words` (what the record says, worded in Python from the rest) would be stale
const edited = (view: IRunView, changes: Partial<IRunView>): IRunView => {
  const { words: _stale, ...rest } = view;
  return { ...rest, ...changes };
};

function model(data: unknown): any {
  return { trusted: false, data: { [MIME_TYPE]: data }, metadata: {}, setData: () => undefined };
}

async function render(view: unknown): Promise<HTMLElement> {
  const renderer = rendererFactory.createRenderer({
    mimeType: MIME_TYPE,
    sanitizer: { sanitize: (s: string) => s },
    resolver: null,
    linkHandler: null,
    latexTypesetter: null
  } as any) as RunRecordRenderer;
  await renderer.renderModel(model(view));
  document.body.appendChild(renderer.node);
  return renderer.node;
}

const texts = (el: Element, sel: string) => [...el.querySelectorAll(sel)].map(x => x.textContent ?? '');

describe('the extension', () => {
  it('is a safe MIME renderer of the run record, ranked ahead of text/html', () => {
    expect(extension.id).toBe('nbagent-labextension:run-record');
    expect(extension.rendererFactory.mimeTypes).toEqual(['application/vnd.nbagent.run+json']);
    expect(rendererFactory.safe).toBe(true);
    expect(extension.rank).toBeLessThan(50);
  });
});

describe('a finished run', () => {
  it('shows the header, the prompt, the timeline and the totals', async () => {
    const view = load('full');
    const node = await render(view);
    expect(node.classList.contains(RECORD_CLASS)).toBe(true);
    const root = node.querySelector('.nbagent-live.nbv-static')!;
    expect(root).not.toBeNull();
    expect(root.classList.contains('nbv-status-completed_with_errors')).toBe(true);
    expect(root.querySelector('.nbv-status')!.textContent).toContain('completed with errors');
    expect(root.querySelector('.nbv-meta')!.textContent).toContain('nbagent/scripted');
    expect(root.querySelector('.nbv-prompt')!.textContent).toBe(view.prompt);
    // the timeline: every step, tools with arguments, risk, status, duration and result preview
    const steps = root.querySelectorAll('.nbv-steps > li');
    expect(steps.length).toBe(view.steps!.length);
    const tool = root.querySelector('.nbv-step.nbv-k-tool.nbv-st-ok')!;
    expect(tool.querySelector('.nbv-tool')!.textContent).toBe('read_file');
    expect(tool.querySelector('.nbv-args')!.textContent).toBe('(path="sales.csv")');
    expect(tool.querySelector('.nbv-risk')!.textContent).toBe('READ_ONLY');
    // what it did, as a sentence (nbagent/ui/step_words.py), then the call and its duration
    expect(tool.querySelector('.nbv-said-text')!.textContent).toBe('read sales.csv, lines 1-5 of 5');
    expect(tool.querySelector('.nbv-main')!.textContent).toMatch(/ · [\d.]+ (ms|s)$/);
    expect(tool.querySelector('.nbv-result')!.textContent).toContain('North,10');
    expect(texts(root, '.nbv-k-model .nbv-facts').every(t => /\d+ tokens · \$/.test(t))).toBe(true);
    expect(root.querySelector('.nbv-k-denied .nbv-why')!.textContent).toContain('excluded');
    expect(root.querySelector('.nbv-k-question')!.textContent).toContain('answer: EUR');
    // totals, the run id and the log
    const foot = root.querySelector('.nbv-foot')!.textContent!;
    expect(foot).toContain(`${view.totals!.tool_calls ?? view.totals!.steps} tool calls`); // not "steps": see the timeline's entries
    expect(foot).toContain(`${(view.totals!.tokens as number).toLocaleString('en-US')} tokens`);
    expect(root.querySelector('.nbv-run-id')!.textContent).toBe(view.run_id);
    expect(root.querySelector('.nbv-log')!.textContent).toBe(view.log_path);
    // static: the one thing to click is Reproduce (reproduce.test.ts); Undo… comes only for a run that changed
    // something (undo.test.ts); no waiting hint
    const buttons = [...root.querySelectorAll('button, input')].map(b => b.textContent);
    expect(buttons).toEqual(['Reproduce']);
    expect(root.querySelector('.nbv-pending')).toBeNull();
  });

  it('shows each plan with its steps, diffs and every decision (who, when, why)', async () => {
    const view = load('full');
    const root = (await render(view)).querySelector('.nbv-static')!;
    const plans = root.querySelectorAll('.nbv-plan');
    expect(plans.length).toBe(view.plans!.length);
    const heads = texts(root, '.nbv-plan-head');
    expect(heads.some(t => t.includes('sent back to the model'))).toBe(true);
    expect(heads.some(t => t.includes('approved'))).toBe(true);
    expect(heads.some(t => t.includes('denied'))).toBe(true);
    const decisions = texts(root, '.nbv-decisions li');
    // each decision once, who and when ("approved by you · 14:02"), never a raw plan id
    expect(decisions.some(t => /^refined by you · .+ — feedback: list all three regions$/.test(t))).toBe(true);
    expect(decisions.some(t => /^approved by you · /.test(t))).toBe(true);
    expect(decisions.some(t => /^denied by you · .+ — reason: keep the raw data$/.test(t))).toBe(true);
    expect(root.textContent).not.toMatch(/approved by user|runs without asking/);
    // diffs of the file writes, open (short), lines marked
    const diff = root.querySelector('details .nbv-diff')!;
    expect((diff.closest('details') as HTMLDetailsElement).open).toBe(true);
    expect(texts(root, '.nbv-add')).toContain('+# Sales report');
    expect(root.querySelector('.nbv-fhead')).not.toBeNull();
    expect(texts(root, '.nbv-plan th')).toEqual(expect.arrayContaining(['tool', 'target', 'risk', 'arguments']));
  });

  it('renders the answer as Markdown and keeps untrusted text as text', async () => {
    const view = load('full');
    const root = (await render(view)).querySelector('.nbv-static')!;
    const md = root.querySelector('.nbv-answer .nbv-md')!;
    expect(md.querySelector('h4')!.textContent).toBe('Top regions');
    expect(texts(md, 'strong')).toEqual(['North']);
    expect(texts(md, 'li')).toEqual(['North', 'South', 'East']);
    expect([...md.querySelectorAll('a')].map(a => a.getAttribute('href'))).toEqual(['https://example.com/a?b=1']);
    // the <script> and <img onerror> in the prompt, the model's text, a tool result and the answer stay text
    expect(document.querySelectorAll('script, img, iframe').length).toBe(0);
    expect(root.textContent).toContain('<script>alert("x")</script>');
    expect(root.querySelectorAll('[onerror]').length).toBe(0);
  });
});

describe('a run waiting for approval', () => {
  it('shows the plan card with its diff and the %agent lines that answer it, with no buttons', async () => {
    const view = load('waiting');
    const root = (await render(view)).querySelector('.nbv-static')!;
    expect(root.classList.contains('nbv-status-waiting')).toBe(true);
    const card = root.querySelector('.nbv-plan.nbv-plan-waiting')!;
    expect(card.querySelector('.nbv-plan-head')!.textContent).toContain('waiting for approval');
    expect(texts(card, '.nbv-add')).toContain('+new line');
    expect(texts(card, '.nbv-del')).toContain('-old line');
    const hint = root.querySelector('.nbv-pending .nbv-hint')!.textContent!;
    const rid = view.run_id!.slice(0, 12);
    expect(hint).toContain(`%agent approve ${rid}`);
    expect(hint).toContain(`%agent deny ${rid} "reason"`);
    expect(hint).toContain(`%agent refine ${rid} "feedback"`);
    expect(root.querySelectorAll('button, input').length).toBe(0);
  });

  it('says how to resume an interrupted run and answer a question', async () => {
    const interrupted = edited(load('full'), { status: 'interrupted', pending: null });
    let root = (await render(interrupted)).querySelector('.nbv-static')!;
    expect(root.querySelector('.nbv-pending')!.textContent).toContain('%agent resume');
    const asking = edited(load('waiting'), {
      pending: { kind: 'human_input', request_id: 'q-1', plan_id: null, question: 'Which year?' }
    });
    root = (await render(asking)).querySelector('.nbv-static')!;
    expect(root.querySelector('.nbv-pending')!.textContent).toContain('waiting for an answer to: Which year?');
    expect(root.querySelector('.nbv-pending')!.textContent).toContain('%agent answer');
  });
});

describe('what an approval says', () => {
  const step = (tool: string, target: string | null, risk: string) => ({ tool, target, risk, arguments: {} });
  const HIGH = 'WRITE_HIGH_RISK';

  it('is phrased from the plan: the button names the action and the target', () => {
    expect(approveLabel({ steps: [step('delete_file', 'data.txt', HIGH)] })).toBe('Delete data.txt');
    expect(approveLabel({ steps: [step('write_file', 'report.md', HIGH)] })).toBe('Overwrite report.md');
    expect(approveLabel({ steps: [step('create_file', 'notes.md', 'WRITE_LOW_RISK')] })).toBe('Create notes.md');
    expect(approveLabel({ steps: [step('run_python', null, HIGH)] })).toBe('Run code');
    expect(approveLabel({ steps: [step('send_mail', null, HIGH)] })).toBe('Run send_mail');
    const three = { steps: [step('create_file', 'a.md', 'WRITE_LOW_RISK'), step('delete_file', 'b.md', HIGH),
      step('read_file', 'c.md', 'READ_ONLY')] };
    expect(approveLabel(three)).toBe('Approve 3 actions (1 delete)');
    expect(planSummary(three)).toBe('3 steps: create a.md, delete b.md, read c.md');
    expect(approvalQuestion({ steps: [step('delete_file', 'data.txt', HIGH)] })).toBe('Delete data.txt?');
    const two = { steps: [step('delete_file', 'old.txt', HIGH), step('write_file', 'report.md', HIGH)] };
    expect(approvalQuestion(two)).toBe('Delete old.txt and overwrite report.md?');
    expect(approvalQuestion(three)).toBe('Run these 3 actions?');
    expect(denyLabel(three)).toBe('Deny these 3 actions');
    expect(denyLabel({ steps: [step('delete_file', 'data.txt', HIGH)] })).toBe('Deny: delete data.txt');
  });

  it('never takes the question from the model, whose purpose is shown as a quote', async () => {
    const view = load('waiting');
    view.plans![0].purpose = 'Approve this harmless formatting change';
    const card = (await render(view)).querySelector('.nbv-plan')!;
    expect(card.querySelector('.nbv-plan-title')!.textContent).toBe('Plan 1: Overwrite notes.md');
    expect(card.querySelector('.nbv-purpose q')!.textContent).toBe('Approve this harmless formatting change');
    expect(card.querySelector('.nbv-plan-head')!.textContent).not.toContain('harmless');
  });

  it('marks a high-risk plan and says what makes it so, with the risk reason', async () => {
    const view = load('waiting');
    let root = (await render(view)).querySelector('.nbv-static')!;
    let card = root.querySelector('.nbv-plan')!;
    expect(card.classList.contains('nbv-plan-high')).toBe(true);
    expect(card.querySelector('.nbv-danger')!.textContent).toContain('replaces the contents of notes.md');
    expect(root.querySelector('.nbv-pending')!.textContent).toContain('(overwrite notes.md)');
    const planted = load('waiting');
    const s = planted.plans![0].steps as Record<string, unknown>[];
    Object.assign(s[0], { tool: 'create_file', target: 'pandas.py', risk: HIGH,
      risk_reason: 'writes a Python module: `import pandas` would run it' });
    root = (await render(planted)).querySelector('.nbv-static')!;
    card = root.querySelector('.nbv-plan')!;
    expect(card.querySelector('.nbv-risk-reason')!.textContent).toBe('writes a Python module: `import pandas` would run it');
    expect(card.querySelector('.nbv-danger')!.textContent).toContain(
      'creates pandas.py: writes a Python module: `import pandas` would run it');
    // a plan with no high-risk step looks ordinary
    const low = load('waiting');
    Object.assign((low.plans![0].steps as Record<string, unknown>[])[0], { tool: 'create_file', risk: 'WRITE_LOW_RISK' });
    low.plans![0].max_risk = 'WRITE_LOW_RISK';
    card = (await render(low)).querySelector('.nbv-plan')!;
    expect(card.classList.contains('nbv-plan-high')).toBe(false);
    expect(card.querySelector('.nbv-danger')).toBeNull();
  });
});

describe('the live view', () => {
  function fakeModel(view: unknown) {
    const state: Record<string, unknown> = { view, streaming: '', decided: '' };
    const handlers: Record<string, Array<() => void>> = {};
    const log: unknown[][] = [];
    return {
      log,
      get: (k: string) => state[k],
      set: (k: string, v: unknown) => log.push(['set', k, v]),
      save_changes: () => log.push(['save']),
      send: (content: unknown) => log.push(['send', content]),
      on: (ev: string, f: () => void) => (handlers[ev] ||= []).push(f),
      off: () => undefined,
      fire(k: string, v: unknown) {
        state[k] = v;
        (handlers[`change:${k}`] || []).forEach(f => f());
      }
    };
  }

  it('sends a click as one custom message, whatever is clicked after it, and syncs no state', async () => {
    // @ts-expect-error: a plain .js module outside this package
    const live = (await import('../../nbagent/ui/run_view.js')).default;
    const view = load('waiting');
    const m = fakeModel(view);
    const el = document.createElement('div');
    document.body.appendChild(el);
    live.render({ model: m, el });
    const approve = [...el.querySelectorAll('button')].find(b => b.textContent === 'Overwrite notes.md')!;
    expect(approve.classList.contains('nbv-approve-danger')).toBe(true);
    expect(el.querySelector('.nbv-plan .nbv-decide-q')!.textContent).toBe('Overwrite notes.md?');
    approve.click();
    approve.dispatchEvent(new MouseEvent('click')); // a double click
    const decisions = m.log.filter(x => x[0] === 'send' && (x[1] as any).event === 'decision');
    expect(decisions.length).toBe(1);
    expect(decisions[0][1]).toMatchObject({ request_id: view.pending!.request_id, action: 'approve' });
    expect([...el.querySelectorAll('.nbv-decide button')].every(b => (b as HTMLButtonElement).disabled)).toBe(true);
    // the next request gets a fresh panel; the decided card has nothing to click
    const next = structuredClone(view);
    next.decisions = [{ kind: 'approved', by: 'user', plan_id: view.pending!.plan_id, request_id: view.pending!.request_id }];
    (next.plans![0] as any).status = 'approved';
    next.plans!.push({ ...structuredClone(view.plans![0]), plan_id: 'plan-2', status: 'proposed' });
    next.pending = { ...view.pending!, request_id: 'req-2', plan_id: 'plan-2' };
    m.fire('view', next);
    const cards = el.querySelectorAll('.nbv-plan');
    expect(cards[0].querySelectorAll('button').length).toBe(0);
    expect((cards[1].querySelector('.nbv-approve') as HTMLButtonElement).disabled).toBe(false);
    (cards[1].querySelector('.nbv-approve') as HTMLButtonElement).click();
    expect(m.log.filter(x => x[0] === 'send' && (x[1] as any).event === 'decision').length).toBe(2);
    expect(m.log.filter(x => x[0] === 'set' || x[0] === 'save').length).toBe(0);
  });
});

describe('a sub-agent waiting in its parent\'s view', () => {
  it('gets a card of its own, phrased from the plan the pending request carries', async () => {
    // @ts-expect-error: a plain .js module outside this package
    const live = (await import('../../nbagent/ui/run_view.js')).default;
    const view = { ...load('waiting'), plans: [], pending: { kind: 'approval', request_id: 'child-req', plan_id: 'child-plan',
      run_id: 'child-run', question: null, plan: { purpose: 'clean up', max_risk: 'WRITE_HIGH_RISK',
        steps: [{ tool: 'delete_file', target: 'tmp.csv', risk: 'WRITE_HIGH_RISK', arguments: { path: 'tmp.csv' } }] } } };
    const sent: unknown[] = [];
    const m = { get: (k: string) => ({ view, streaming: '', decided: '' } as any)[k], send: (c: unknown) => sent.push(c),
      on: () => undefined, off: () => undefined };
    const el = document.createElement('div');
    live.render({ model: m, el });
    const card = el.querySelector('.nbv-plan.nbv-plan-waiting.nbv-plan-high')!;
    expect(card.querySelector('.nbv-plan-title')!.textContent).toBe('Plan: Delete tmp.csv');
    const button = [...card.querySelectorAll('button')].find(b => b.textContent === 'Delete tmp.csv')!;
    button.click();
    expect(sent).toContainEqual(expect.objectContaining({ event: 'decision', request_id: 'child-req', action: 'approve' }));
  });
});

describe('long and superseded runs', () => {
  it('collapses the middle of a long timeline and long results', async () => {
    const view = load('long');
    const last = view.steps!.filter(s => s.kind === 'tool').pop()!;
    last.result_preview = Array.from({ length: 40 }, (_, i) => `row ${i}`).join('\n'); // a long result (run_python)
    const root = (await render(view)).querySelector('.nbv-static')!;
    const n = view.steps!.length;
    expect(n).toBeGreaterThan(20);
    const lists = root.querySelectorAll('.nbv-timeline > ol.nbv-steps');
    expect(lists.length).toBe(2);
    const middle = root.querySelector('.nbv-timeline > details') as HTMLDetailsElement;
    expect(middle.open).toBe(false);
    expect(middle.querySelector('summary')!.textContent).toBe(`… ${n - 16} more steps`);
    expect(middle.querySelectorAll('li').length).toBe(n - 16);
    expect(middle.querySelector('ol')!.getAttribute('start')).toBe('9');
    expect(root.querySelectorAll('li.nbv-step').length).toBe(n); // every step is there, some collapsed
    const collapsed = [...root.querySelectorAll('details > summary')].map(s => s.textContent ?? '');
    // the step says what it did in a sentence; its raw result is behind a disclosure
    expect(collapsed).toContain('result');
    expect(texts(root, '.nbv-result')).toContain(last.result_preview);
  });

  it('shows the superseded banner', async () => {
    const view = { ...load('full'), status: 'superseded', superseded_by: '01NEWERRUN' };
    const root = (await render(view)).querySelector('.nbv-static')!;
    expect(root.querySelector('.nbv-superseded')!.textContent).toBe(
      '↷ Superseded by run 01NEWERRUN: an earlier cell was re-run.'
    );
    expect(root.querySelector('.nbv-pending')).toBeNull();
  });

  it('keeps details open across re-renders and survives bad data', async () => {
    const renderer = new RunRecordRenderer({ mimeType: MIME_TYPE } as any);
    await renderer.renderModel(model(load('long')));
    const middle = renderer.node.querySelector('.nbv-timeline > details') as HTMLDetailsElement;
    middle.open = true;
    middle.dispatchEvent(new Event('toggle'));
    await renderer.renderModel(model(load('long')));
    expect((renderer.node.querySelector('.nbv-timeline > details') as HTMLDetailsElement).open).toBe(true);
    await renderer.renderModel(model('not a record'));
    expect(renderer.node.querySelector('.jp-nbagent-RunRecord-error')!.textContent).toContain('could not be shown');
    const empty = await render({});
    expect(empty.querySelector('.nbv-static .nbv-foot')!.textContent).toContain('0 tool calls');
  });
});

import { insertCell, insertionIndex } from '../src/cells';

describe('cells proposed by the agent', () => {
  const cell = (id: string, run?: string) => ({
    id,
    getMetadata: (key?: string) => (key === 'nbagent' && run ? { run_id: run } : undefined)
  });

  it('go below the agent cell, after the cells the same run inserted', () => {
    const cells = [cell('load'), cell('agent'), cell('x1', 'run-1'), cell('next')];
    const inserted: Array<[number, Record<string, unknown>]> = [];
    const nb = { cells, insertCell: (i: number, c: Record<string, unknown>) => inserted.push([i, c]) };
    const request = { after_cell_id: 'agent', source: 'print(1)\n', metadata: { nbagent: { run_id: 'run-1' } } };
    expect(insertionIndex(nb, request)).toBe(3);
    expect(insertionIndex(nb, { ...request, metadata: { nbagent: { run_id: 'run-2' } } })).toBe(2);
    expect(insertionIndex(nb, { ...request, after_cell_id: 'gone' })).toBe(4);
    insertCell(nb, request);
    expect(inserted).toEqual([[3, { cell_type: 'code', source: 'print(1)\n', metadata: request.metadata }]]);
  });
});
