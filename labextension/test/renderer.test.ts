import { readFileSync } from 'fs';
import { join } from 'path';

import { describe, expect, it } from 'vitest';

import extension, { MIME_TYPE, RECORD_CLASS, RunRecordRenderer, rendererFactory } from '../src/index';
import type { IRunView } from '../src/view';

// Run views made by the Python pipeline: the committed ones, or fresh ones when the pytest suite runs this
// (tests/test_labextension.py sets NBAGENT_VIEW_FIXTURES).
const FIXTURES = process.env.NBAGENT_VIEW_FIXTURES || join(__dirname, 'fixtures');
const load = (name: string): IRunView => JSON.parse(readFileSync(join(FIXTURES, `${name}.json`), 'utf8'));

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
    expect(tool.querySelector('.nbv-facts')!.textContent).toMatch(/ok · [\d.]+ (ms|s)/);
    expect(tool.querySelector('.nbv-result')!.textContent).toContain('North,10');
    expect(texts(root, '.nbv-k-model .nbv-facts').every(t => /\d+ tokens · \$/.test(t))).toBe(true);
    expect(root.querySelector('.nbv-k-denied .nbv-why')!.textContent).toContain('excluded');
    expect(root.querySelector('.nbv-k-question')!.textContent).toContain('answer: EUR');
    // totals, the run id and the log
    const foot = root.querySelector('.nbv-foot')!.textContent!;
    expect(foot).toContain(`${view.totals!.steps} steps`);
    expect(foot).toContain(`${(view.totals!.tokens as number).toLocaleString('en-US')} tokens`);
    expect(root.querySelector('.nbv-run-id')!.textContent).toBe(view.run_id);
    expect(root.querySelector('.nbv-log')!.textContent).toBe(view.log_path);
    // static: nothing to click, no waiting hint
    expect(root.querySelectorAll('button, input').length).toBe(0);
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
    expect(decisions.some(t => /^refined by user at .+ — feedback: list all three regions$/.test(t))).toBe(true);
    expect(decisions.some(t => /^approved by user at /.test(t))).toBe(true);
    expect(decisions.some(t => /^denied by user at .+ — reason: keep the raw data$/.test(t))).toBe(true);
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
    const interrupted = { ...load('full'), status: 'interrupted', pending: null };
    let root = (await render(interrupted)).querySelector('.nbv-static')!;
    expect(root.querySelector('.nbv-pending')!.textContent).toContain('%agent resume');
    const asking = {
      ...load('waiting'),
      pending: { kind: 'human_input', request_id: 'q-1', plan_id: null, question: 'Which year?' }
    };
    root = (await render(asking)).querySelector('.nbv-static')!;
    expect(root.querySelector('.nbv-pending')!.textContent).toContain('waiting for an answer to: Which year?');
    expect(root.querySelector('.nbv-pending')!.textContent).toContain('%agent answer');
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
    expect(collapsed).toContain('result (40 lines, 269 chars)');
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
    expect(empty.querySelector('.nbv-static .nbv-foot')!.textContent).toContain('0 steps');
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
