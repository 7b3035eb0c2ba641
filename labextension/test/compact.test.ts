import { readFileSync } from 'fs';
import { join } from 'path';

import { PageConfig } from '@jupyterlab/coreutils';
import { afterEach, describe, expect, it } from 'vitest';

import { MIME_TYPE, RunRecordRenderer, rendererFactory, showOffer } from '../src/index';
import { approvalQuestion, approveLabel } from '../src/view';
import type { IRunView } from '../src/view';
import { recordHtml } from './kernel_record';
import waiting, {
  FOCUS_COMMAND, FOCUS_KEYS, NOTICE_CLASS, QUIET_WHILE_AGENT, agentRequests, focusWaiting, updateNotice, watchKernel
} from '../src/waiting';

// Issue 46 (46-F): after ten requests a notebook was mostly 30-60-line records; cards named cells `nb1_0` or a
// 32-hex id; a waiting card took 14 Tabs to reach, with no shortcut and no word when it was off-screen; the kernel
// said Idle while an %%agent cell ran.

const FIXTURES = process.env.NBAGENT_VIEW_FIXTURES || join(__dirname, 'fixtures');
const load = (name: string): IRunView => JSON.parse(readFileSync(join(FIXTURES, `${name}.json`), 'utf8'));
const bare = (view: IRunView, changes: Partial<IRunView>): IRunView => {
  const { words: _stale, ...rest } = view; // a view changed by hand: its words would be stale
  return { ...rest, ...changes };
};

afterEach(() => document.body.replaceChildren());

async function draw(view: IRunView, renderer?: RunRecordRenderer): Promise<RunRecordRenderer> {
  const r = renderer ?? rendererFactory.createRenderer({ mimeType: MIME_TYPE } as any) as RunRecordRenderer;
  await r.renderModel({ trusted: false, data: { [MIME_TYPE]: view, 'text/html': recordHtml(view) }, metadata: {},
    setData: () => undefined } as any);
  document.body.appendChild(r.node);
  return r;
}

const folded = (r: RunRecordRenderer) => r.node.querySelector<HTMLDetailsElement>('.nbagent-run > details.nbr-compact');

describe('a finished run folds to two lines', () => {
  it('shows the status, the request, the answer, counts and cost; the whole record behind them', async () => {
    const view = bare(load('long'), { answer: '## Read 12 files\nthe rest', prompt: 'read every file\nand more' });
    const d = folded(await draw(view))!;
    expect(d).toBeTruthy();
    expect(d.open).toBe(false);
    const summary = d.querySelector(':scope > summary')!;
    expect(summary.querySelector('strong')!.textContent).toBe('✓ completed');
    const more = summary.querySelector('.nbr-summary-more')!.textContent!;
    expect(summary.textContent).toBe(`✓ completed · read every file${more}`);
    expect(more.startsWith('Read 12 files · ')).toBe(true);
    expect(more).toMatch(/ · \d+ tool calls? · .*changed · \$/);
    // every section is behind it: the timeline, the totals
    expect(d.querySelector('.nbr-steps')).toBeTruthy();
    expect(d.querySelector('.nbr-foot')).toBeTruthy();
  });

  it("says the outcome of a run with errors, and the record's words when the view carries them", async () => {
    const view = load('full');
    const d = folded(await draw(view))!;
    const more = d.querySelector('.nbr-summary-more')!.textContent!;
    expect(more.startsWith('⚠ ')).toBe(true);
    if (view.words && typeof (view.words as any).summary_more === 'string') {
      expect(more).toBe((view.words as any).summary_more);
      expect(d.querySelector('summary')!.textContent!.startsWith((view.words as any).summary)).toBe(true);
    }
  });

  it('never folds a run that waits, failed, was interrupted or still runs', async () => {
    const waitingView = load('waiting');
    const w = await draw(waitingView);
    expect(folded(w)).toBeNull();
    expect(w.node.querySelector('.nbr-banner .nbr-hint')!.textContent).toContain('%agent approve');
    for (const status of ['failed', 'interrupted', 'running']) {
      const r = await draw(bare(load('long'), { status, error: status === 'failed' ? 'RuntimeError: boom' : null }));
      expect(folded(r)).toBeNull();
      if (status === 'failed') {
        expect(r.node.querySelector('.nbr-errors')!.textContent).toContain('boom');
      }
    }
  });

  it('stays open as the person left it, through a re-render and a new renderer of the same run', async () => {
    const view = bare(load('long'), { run_id: 'RUNOPEN1' });
    const r = await draw(view);
    const d = folded(r)!;
    d.open = true;
    d.dispatchEvent(new Event('toggle'));
    await draw({ ...view, revision: 99 }, r); // the kernel's newer record of the run
    expect(folded(r)!.open).toBe(true);
    const other = await draw({ ...view }); // records.ts replaced the output: a new renderer
    expect(folded(other)!.open).toBe(true);
  });

  it("keeps the kernel's Undo… in sight below the summary", async () => {
    const view = bare(load('long'), { run_id: 'RUNUNDO1' });
    const r = await draw(view);
    showOffer(r.node, 'RUNUNDO1', { undo: true, line: '%agent undo RUNUNDO1 undoes 1 cell', title: 't' } as any);
    const button = r.node.querySelector('.nbr-undo-offer')!;
    expect(button).toBeTruthy();
    expect(button.closest('details')).toBeNull();
  });
});

describe('cards name cells as the page shows them', () => {
  const plan = {
    plan_id: 'p1', max_risk: 'WRITE_HIGH_RISK', status: 'proposed', steps: [{
      call_id: 'nb2_0', tool: 'replace_cell', risk: 'WRITE_HIGH_RISK', target: 'nb1_0',
      arguments: { cell: 'nb1_0', code: 'x = 2' },
      cell: { cell_id: '0123456789abcdef0123456789abcdef', count: 3, first_line: "df = pd.read_csv('sales.csv')" }
    }]
  };

  it('says [3] and its first line, the ids only in the tooltip', async () => {
    expect(approveLabel(plan)).toBe('Replace cell [3] and run it');
    expect(approvalQuestion(plan)).toBe('Replace cell [3] and run it?');
    const view = { ...bare(load('waiting'), {}), plans: [plan], pending: null, status: 'completed' } as IRunView;
    const r = await draw(view);
    const name = r.node.querySelector('.nbr-plan .nbr-cell-name')!;
    expect(name.textContent).toBe("[3] df = pd.read_csv('sales.csv')");
    expect(name.getAttribute('title')).toBe('cell 0123456789abcdef0123456789abcdef (the model wrote nb1_0)');
    expect(r.node.querySelector('.nbr-plan tbody td:nth-child(3)')!.textContent).not.toContain('nb1_0');
  });

  it('names a new cell by the cell it goes below', async () => {
    const newCell = { ...plan, steps: [{ call_id: 'nb3_0', tool: 'run_cell', risk: 'WRITE_HIGH_RISK',
      arguments: { code: 'import pandas as pd\nx' }, cell: { new: true, below: 4, first_line: 'import pandas as pd' } }] };
    const view = { ...bare(load('waiting'), {}), plans: [newCell], pending: null, status: 'completed' } as IRunView;
    const r = await draw(view);
    expect(r.node.querySelector('.nbr-plan .nbr-cell-name')!.textContent)
      .toBe('new cell below [4]: import pandas as pd');
  });
});

// ------------------------------------------------------------------------------------------------ the waiting card

function fakeApp(panels: unknown[]) {
  const commands: Record<string, { execute: () => unknown }> = {};
  const keys: { command: string; keys: string[]; selector: string }[] = [];
  return {
    commands: {
      execute: (id: string) => Promise.resolve(commands[id].execute()),
      addCommand: (id: string, o: { execute: () => unknown }) => { commands[id] = o; },
      addKeyBinding: (o: { command: string; keys: string[]; selector: string }) => { keys.push(o); }
    },
    shell: { widgets: () => panels },
    keys
  };
}

/** A notebook panel of three cells; the second holds a live view whose card waits. */
function notebook(): { panel: any; approve: HTMLButtonElement } {
  const node = document.createElement('div');
  node.className = 'jp-NotebookPanel';
  const content = document.createElement('div');
  node.appendChild(content);
  const cells = [0, 1, 2].map(() => {
    const cell = document.createElement('div');
    content.appendChild(cell);
    return { node: cell };
  });
  const live = document.createElement('div');
  live.className = 'nbagent-live';
  live.innerHTML = '<div class="nbv-decide" role="group" aria-label="decision: Run a cell?" data-request-id="r1">'
    + '<div class="nbv-decide-q">Run a cell?</div><div class="nbv-buttons"><button class="nbv-btn nbv-approve">'
    + 'Run a cell</button><button class="nbv-btn nbv-deny">Deny</button></div></div>';
  cells[1].node.appendChild(live);
  document.body.appendChild(node);
  const panel = { node, isVisible: true, sessionContext: {}, content: { node: content, widgets: cells, model: {} } };
  return { panel, approve: live.querySelector('button.nbv-approve')! };
}

describe('the way to a card that waits', () => {
  it('is a command on Ctrl+Shift+Y that focuses the first waiting card\'s Approve button', async () => {
    const { panel, approve } = notebook();
    const app = fakeApp([panel]);
    waiting.activate(app as any);
    expect(app.keys).toEqual([{ command: FOCUS_COMMAND, keys: FOCUS_KEYS, selector: 'body' }]);
    expect(FOCUS_KEYS).toEqual(['Accel Shift Y']);
    expect(await app.commands.execute(FOCUS_COMMAND)).toBe(true);
    expect(document.activeElement).toBe(approve);
  });

  it('skips a card already decided, and says false when none waits', async () => {
    const { panel, approve } = notebook();
    approve.disabled = true;
    expect(await focusWaiting(fakeApp([panel]) as any)).toBe(false);
  });

  it('shows a notice while the card is out of view, which goes to the card when clicked', async () => {
    const { panel, approve } = notebook();
    const app = fakeApp([panel]);
    // jsdom lays nothing out: every box is empty, so the card is out of view
    const notice = updateNotice(app as any, panel)!;
    expect(notice.classList.contains(NOTICE_CLASS)).toBe(true);
    expect(notice.hidden).toBe(false);
    expect(notice.textContent).toBe('‖ nbagent waits: Run a cell? — Ctrl+Shift+Y');
    notice.click();
    await new Promise(resolve => setTimeout(resolve, 0));
    expect(document.activeElement).toBe(approve);
    // in view: no notice
    approve.closest<HTMLElement>('.nbv-decide')!.getBoundingClientRect = () =>
      ({ top: 100, bottom: 200, height: 100, left: 0, right: 10, width: 10 }) as DOMRect;
    panel.content.node.getBoundingClientRect = () =>
      ({ top: 0, bottom: 600, height: 600, left: 0, right: 10, width: 10 }) as DOMRect;
    expect(updateNotice(app as any, panel)!.hidden).toBe(true);
  });
});

describe('the kernel shown busy while an %%agent cell runs', () => {
  it("keeps comm messages' idle from overriding the cell's busy, until the cell's own idle", () => {
    type Listener = (sender: unknown, args: { msg: any; direction: string }) => void;
    const listeners: Listener[] = [];
    const kernel = { anyMessage: { connect: (fn: Listener) => { listeners.push(fn); return true; } } };
    const emit = (msg: any, direction: string) => listeners.forEach(fn => fn(kernel, { msg, direction }));
    PageConfig.setOption('untracked_message_types', JSON.stringify(['kernel_info_request']));
    watchKernel(kernel);
    watchKernel(kernel); // once per kernel
    expect(listeners.length).toBe(1);
    emit({ header: { msg_type: 'execute_request', msg_id: 'plain' }, content: { code: 'x = 1' } }, 'send');
    expect(agentRequests().size).toBe(0);
    emit({ header: { msg_type: 'execute_request', msg_id: 'A' }, content: { code: '%%agent\nplot it' } }, 'send');
    const quiet = JSON.parse(PageConfig.getOption('untracked_message_types'));
    expect(quiet).toEqual(expect.arrayContaining(['kernel_info_request', ...QUIET_WHILE_AGENT]));
    // a comm message's idle (the click on a card) is not the cell's
    emit({ header: { msg_type: 'status' }, parent_header: { msg_id: 'click' }, content: { execution_state: 'idle' } },
      'recv');
    expect(agentRequests().has('A')).toBe(true);
    emit({ header: { msg_type: 'status' }, parent_header: { msg_id: 'A' }, content: { execution_state: 'idle' } },
      'recv');
    expect(agentRequests().size).toBe(0);
    expect(JSON.parse(PageConfig.getOption('untracked_message_types'))).toEqual(['kernel_info_request']);
  });

  it('ends the cells of a kernel that dies or restarts (no idle comes for them)', () => {
    type Listener = (sender: unknown, args: any) => void;
    const on: Record<string, Listener[]> = { msg: [], status: [] };
    const kernel = {
      anyMessage: { connect: (fn: Listener) => on.msg.push(fn) > 0 },
      statusChanged: { connect: (fn: Listener) => on.status.push(fn) > 0 }
    };
    watchKernel(kernel);
    on.msg.forEach(fn => fn(kernel, { msg: { header: { msg_type: 'execute_request', msg_id: 'B' },
      content: { code: '  %%agent --model x\nhi' } }, direction: 'send' }));
    expect(agentRequests().has('B')).toBe(true);
    expect(JSON.parse(PageConfig.getOption('untracked_message_types'))).toContain('comm_msg');
    on.status.forEach(fn => fn(kernel, 'dead'));
    expect(agentRequests().size).toBe(0);
    expect(JSON.parse(PageConfig.getOption('untracked_message_types'))).not.toContain('comm_msg');
  });
});
