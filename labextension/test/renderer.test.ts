import { readFileSync } from 'fs';
import { join } from 'path';

import { describe, expect, it } from 'vitest';

import extension, { MIME_TYPE, RECORD_CLASS, RunRecordRenderer, rendererFactory } from '../src/index';
import { approvalQuestion, approveLabel, denyLabel, planSummary } from '../src/view';
import type { IRunView } from '../src/view';
import { recordHtml } from './kernel_record';

// Run views made by the Python pipeline: the committed ones, or fresh ones when the pytest suite runs this
// (tests/test_labextension.py sets NBAGENT_VIEW_FIXTURES).
const FIXTURES = process.env.NBAGENT_VIEW_FIXTURES || join(__dirname, 'fixtures');
const load = (name: string): IRunView => JSON.parse(readFileSync(join(FIXTURES, `${name}.json`), 'utf8'));
function model(data: unknown, html?: unknown): any {
  const bundle: Record<string, unknown> = { [MIME_TYPE]: data };
  bundle['text/html'] = html !== undefined ? html : data && typeof data === 'object' ? recordHtml(data) : undefined;
  return { trusted: false, data: bundle, metadata: {}, setData: () => undefined };
}

async function render(view: unknown): Promise<HTMLElement> {
  return renderHtml(view, undefined);
}

async function renderHtml(view: unknown, html: unknown, text?: string): Promise<HTMLElement> {
  const renderer = rendererFactory.createRenderer({
    mimeType: MIME_TYPE,
    sanitizer: { sanitize: (s: string) => s },
    resolver: null,
    linkHandler: null,
    latexTypesetter: null
  } as any) as RunRecordRenderer;
  const m = model(view, html);
  if (text !== undefined) {
    m.data['text/plain'] = text;
  }
  await renderer.renderModel(m);
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
  it('is the HTML the kernel drew, the very text/html nbconvert shows', async () => {
    const view = load('full');
    const node = await render(view);
    expect(node.classList.contains(RECORD_CLASS)).toBe(true);
    const root = node.querySelector('.nbagent-run')!;
    expect(root.getAttribute('data-run-id')).toBe(view.run_id);
    expect(root.getAttribute('role')).toBe('region');
    expect(root.getAttribute('aria-label')).toBe(`nbagent run ${view.run_id}`);
    // what the page shows is the kernel's record, less its <style> (the extension serves record.css) and plus
    // what the page attaches (Reproduce)
    const kernel = document.createElement('div');
    kernel.innerHTML = recordHtml(view);
    kernel.querySelectorAll('style').forEach(e => e.remove());
    const shown = root.cloneNode(true) as HTMLElement;
    shown.querySelectorAll('.nbr-reproduce').forEach(e => e.remove());
    [shown, kernel].forEach(e => e.querySelectorAll('time').forEach(t => t.replaceChildren())); // (the reader's clock)
    expect(shown.textContent).toBe(kernel.querySelector('.nbagent-run')!.textContent);
    expect(root.querySelector('style')).toBeNull();
    expect(root.classList.contains('nbr-status-completed_with_errors')).toBe(true);
    expect(root.querySelector('.nbr-title')!.textContent).toContain('completed with errors');
    expect(root.querySelector('.nbr-meta')!.textContent).toContain('nbagent/scripted');
    expect(root.querySelector('.nbr-prompt')!.textContent).toBe(view.prompt);
    expect(root.querySelectorAll('.nbr-steps > li').length).toBe(view.steps!.length);
    const tool = root.querySelector('.nbr-step.nbr-k-tool.nbr-st-ok')!;
    expect(tool.querySelector('.nbr-said')!.textContent).toBe('read sales.csv, lines 1-5 of 5');
    expect(tool.querySelector('.nbr-tool')!.textContent).toBe('read_file');
    expect(tool.querySelector('.nbr-result')!.textContent).toContain('North,10');
    const foot = root.querySelector('.nbr-foot')!.textContent!;
    expect(foot).toContain(`${view.totals!.tool_calls ?? view.totals!.steps} tool calls`);
    expect(foot).toContain(view.log_path);
    // each decision once, who and when ("approved by you · 14:02", on the reader's clock), never a raw plan id;
    // no "READ_ONLY runs without asking" under every read
    const decisions = texts(root, '.nbr-decisions li');
    const at = (ts: unknown) => new Date(String(ts)).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' });
    const refined = (view.decisions as any[]).find(d => d.kind === 'refined');
    expect(decisions).toContain(`refined by you · ${at(refined.ts)} — feedback: list all three regions`);
    expect(decisions.some(t => /^approved by you · /.test(t))).toBe(true);
    expect(decisions.some(t => /^denied by you · .+ — reason: keep the raw data$/.test(t))).toBe(true);
    expect(root.querySelector('.nbr-decisions time')!.getAttribute('title')).toBe(new Date(refined.ts).toLocaleString());
    expect(root.textContent).not.toMatch(/approved by user|runs without asking|\(plan 01/);
    // the one thing to click is Reproduce (reproduce.test.ts); Undo… only where a kernel says (undo.test.ts)
    expect([...root.querySelectorAll('button, input')].map(b => b.textContent)).toEqual(['Reproduce']);
  });

  it('keeps untrusted text as text: markup in the view or in a crafted text/html never runs or styles the page', async () => {
    const view = load('full');
    const root = (await render(view)).querySelector('.nbagent-run')!;
    expect(document.querySelectorAll('script, img, iframe, style').length).toBe(0);
    expect(root.textContent).toContain('<script>alert("x")</script>');
    expect(root.querySelectorAll('[onerror]').length).toBe(0);
    const md = root.querySelector('.nbr-answer')!;
    expect([...md.querySelectorAll('a')].map(a => a.getAttribute('href'))).toEqual(['https://example.com/a?b=1']);
    // a notebook anyone could write: its text/html is not the kernel's
    const evil = '<div class="nbagent-run jp-Dialog" data-run-id="r" onclick="alert(1)" style="position:fixed">'
      + '<style>body{display:none}</style><script>alert(1)</script><img src=x onerror=alert(1)>'
      + '<a href="javascript:alert(1)">x</a><a href="/files/secret" class="nbr-x lm-mod-hidden">y</a>'
      + '<form action="https://evil.example"><input name="q"><button>Send</button></form>'
      + '<iframe src="https://evil.example"></iframe><svg><script>alert(1)</script></svg>'
      + '<p data-nbagent-focus="r" id="jp-main-dock-panel" title="ok">kept</p>'
      + '<table><tr><td style="text-align:right">1</td><td style="background:url(https://evil.example)">2</td></tr>'
      + '</table></div>';
    const node = await renderHtml({ run_id: 'r', status: 'completed' }, evil);
    const r = node.querySelector('.nbagent-run')!;
    expect(node.querySelectorAll('script, style, img, form, input, iframe, svg, [onclick], [onerror], [id]').length)
      .toBe(0);
    expect(r.getAttribute('class')).toBe('nbagent-run'); // the page's own classes are not the record's to use
    expect(r.hasAttribute('style')).toBe(false);
    expect(r.querySelector('.nbr-x')!.getAttribute('class')).toBe('nbr-x');
    expect([...r.querySelectorAll('a')].map(a => a.getAttribute('href'))).toEqual([null, null]);
    expect(r.querySelector('p')!.hasAttribute('data-nbagent-focus')).toBe(false);
    expect(r.querySelector('p')!.getAttribute('title')).toBe('ok');
    expect([...r.querySelectorAll('td')].map(td => td.getAttribute('style'))).toEqual(['text-align:right', null]);
    expect(r.querySelectorAll('button').length).toBe(0);
  });

  it('shows a record saved without its HTML as its text, and one whose HTML holds no record as an error', async () => {
    let node = await renderHtml(load('full'), null, 'nbagent run X: completed\n  totals: 1 tool call');
    expect(node.querySelector('pre.jp-nbagent-RunRecord-text')!.textContent).toBe(
      'nbagent run X: completed\n  totals: 1 tool call');
    node = await renderHtml(load('full'), '<p>hello</p>');
    expect(node.querySelector('.jp-nbagent-RunRecord-error')!.textContent).toContain('holds no nbagent record');
  });
});

describe('a run waiting for approval', () => {
  it('shows the plan with its diff and the %agent lines that answer it, with no buttons', async () => {
    const view = load('waiting');
    const root = (await render(view)).querySelector('.nbagent-run')!;
    expect(root.classList.contains('nbr-status-waiting')).toBe(true);
    const card = root.querySelector('.nbr-plan.nbr-plan-high')!;
    expect(card.querySelector('.nbr-plan-head')!.textContent).toContain('waiting for approval');
    expect(texts(card, '.nbr-add')).toContain('+new line');
    expect(texts(card, '.nbr-del')).toContain('-old line');
    const hint = root.querySelector('.nbr-banner .nbr-hint')!.textContent!;
    const rid = view.run_id!.slice(0, 12);
    expect(hint).toContain(`%agent approve ${rid}`);
    expect(hint).toContain(`%agent deny ${rid} "reason"`);
    expect(root.querySelectorAll('button, input').length).toBe(0);
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

// what the old renderer of the lab drew itself, now the kernel's words, as the page shows them
describe('a record, as the page shows the kernel\'s HTML', () => {
  const HIGH = 'WRITE_HIGH_RISK';
  const bare = (view: IRunView, changes: Partial<IRunView>): IRunView => {
    const { words: _stale, ...rest } = view; // a view changed by hand: its words would be stale
    return { ...rest, ...changes };
  };

  it('never takes the question from the model, whose purpose is shown as a quote', async () => {
    const view = load('waiting');
    view.plans![0].purpose = 'Approve this harmless formatting change';
    const card = (await render(view)).querySelector('.nbr-plan')!;
    expect(card.querySelector('.nbr-plan-head')!.textContent!.startsWith('Plan 1: Overwrite notes.md ')).toBe(true);
    expect(card.querySelector('.nbr-purpose q')!.textContent).toBe('Approve this harmless formatting change');
    expect(card.querySelector('.nbr-plan-head')!.textContent).not.toContain('harmless');
  });

  it('marks a high-risk plan and says what makes it so, with the risk reason', async () => {
    let card = (await render(load('waiting'))).querySelector('.nbr-plan')!;
    expect(card.classList.contains('nbr-plan-high')).toBe(true);
    expect(card.querySelector('.nbr-danger')!.textContent).toBe(
      '⚠ High risk — this plan replaces the contents of notes.md. Check it before you approve.');
    const planted = load('waiting');
    Object.assign((planted.plans![0].steps as Record<string, unknown>[])[0], { tool: 'create_file',
      target: 'pandas.py', risk: HIGH, risk_reason: 'writes a Python module: `import pandas` would run it' });
    card = (await render(planted)).querySelector('.nbr-plan')!;
    expect(card.querySelector('.nbr-risk-reason')!.textContent).toBe('writes a Python module: `import pandas` would run it');
    expect(card.querySelector('.nbr-danger')!.textContent).toContain(
      'creates pandas.py: writes a Python module: `import pandas` would run it');
    const low = load('waiting');
    Object.assign((low.plans![0].steps as Record<string, unknown>[])[0], { tool: 'create_file', risk: 'WRITE_LOW_RISK' });
    low.plans![0].max_risk = 'WRITE_LOW_RISK';
    card = (await render(low)).querySelector('.nbr-plan')!;
    expect(card.classList.contains('nbr-plan-high')).toBe(false);
    expect(card.querySelector('.nbr-danger')).toBeNull();
  });

  it('says how to resume an interrupted run and answer a question', async () => {
    let root = (await render(bare(load('full'), { status: 'interrupted', pending: null }))).querySelector('.nbagent-run')!;
    expect(root.querySelector('.nbr-pending')!.textContent).toContain('%agent resume');
    const asking = bare(load('waiting'), {
      pending: { kind: 'human_input', request_id: 'q-1', plan_id: null, question: 'Which year?' }
    });
    root = (await render(asking)).querySelector('.nbagent-run')!;
    expect(root.querySelector('.nbr-pending')!.textContent).toContain('waiting for an answer to: Which year?');
    expect(root.querySelector('.nbr-pending')!.textContent).toContain('%agent answer');
  });

  it('shows the superseded banner, folded or not, and no line that answers it', async () => {
    const root = (await render({ ...load('full'), status: 'superseded', superseded_by: '01NEWERRUN' }))
      .querySelector('.nbagent-run')!;
    expect(root.querySelector(':scope > .nbr-superseded')!.textContent).toBe(
      '↷ Superseded by run 01NEWERRUN: an earlier cell was re-run; this record is kept as history.');
    expect(root.querySelector('.nbr-pending')).toBeNull();
  });

  it('collapses the middle of a long timeline and keeps every step', async () => {
    const view = load('long');
    const root = (await render(view)).querySelector('.nbagent-run')!;
    const n = view.steps!.length;
    expect(n).toBeGreaterThan(20);
    const middle = [...root.querySelectorAll('details')].find(
      d => /more entries/.test(d.querySelector('summary')!.textContent!)) as HTMLDetailsElement;
    expect(middle.open).toBe(false);
    expect(middle.querySelector('summary')!.textContent).toBe(`… ${n - 16} more entries`);
    expect(middle.querySelectorAll('li').length).toBe(n - 16);
    expect(root.querySelectorAll('li.nbr-step').length).toBe(n);
  });
});

describe('a long record', () => {
  it('keeps its disclosures open across re-renders, and a bad record says so', async () => {
    const renderer = new RunRecordRenderer({ mimeType: MIME_TYPE } as any);
    await renderer.renderModel(model(load('long')));
    const middle = () => [...renderer.node.querySelectorAll('details')].find(
      d => /more entries/.test(d.querySelector('summary')!.textContent!)) as HTMLDetailsElement;
    expect(middle().open).toBe(false);
    expect(middle().querySelector('ol')!.getAttribute('start')).toBe('9'); // the numbering goes on where it was cut
    middle().open = true;
    middle().dispatchEvent(new Event('toggle'));
    await renderer.renderModel(model(load('long')));
    expect(middle().open).toBe(true);
    await renderer.renderModel(model('not a record', '<div class="nbagent-run"></div>'));
    expect(renderer.node.querySelector('.jp-nbagent-RunRecord-error')!.textContent).toContain('could not be shown');
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
