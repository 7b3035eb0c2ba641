import { describe, expect, it } from 'vitest';

import plugins, { applyPayload, COMM_TARGET, ITarget } from '../src/cells';
import { IOutputJSON, OutputRouter, outputOf } from '../src/outputs';

// --------------------------------------------------------------------------------------- fakes of JupyterLab's
// models, with the behaviour the router relies on: an output model that merges consecutive streams of one name and
// clears at the next add after clear(wait=true) (OutputAreaModel), a code cell model whose execution count makes it
// idle (CodeCellModel + CodeCell.onStateChanged), a shared notebook whose inserted cells get models at once.

class Outputs {
  items: IOutputJSON[] = [];
  private clearNext = false;
  get length(): number {
    return this.items.length;
  }
  add(output: IOutputJSON): number {
    if (this.clearNext) {
      this.items = [];
      this.clearNext = false;
    }
    const last = this.items[this.items.length - 1];
    if (output.output_type === 'stream' && last?.output_type === 'stream' && last.name === output.name) {
      last.text = String(last.text) + String(output.text);
      return this.items.length;
    }
    this.items.push(output);
    return this.items.length;
  }
  set(index: number, output: IOutputJSON): void {
    this.items[index] = output;
  }
  clear(wait = false): void {
    if (wait) {
      this.clearNext = true;
    } else {
      this.items = [];
    }
  }
}

class Cell {
  outputs = new Outputs();
  trusted = false;
  executionState = 'idle';
  private count: number | null = null;
  source: string;
  metadata: Record<string, unknown>;
  readonly type: string;
  constructor(readonly id: string, spec: Record<string, unknown>) {
    this.type = String(spec.cell_type ?? 'code');
    this.source = String(spec.source ?? '');
    this.metadata = (spec.metadata as Record<string, unknown>) ?? {};
    this.count = (spec.execution_count as number | null) ?? null;
    for (const o of (spec.outputs as IOutputJSON[]) ?? []) {
      this.outputs.add(o);
    }
  }
  get executionCount(): number | null {
    return this.count;
  }
  set executionCount(n: number | null) {
    this.count = n;
    if (n !== null) {
      this.executionState = 'idle';
    }
  }
  // the shared cell's members
  getMetadata(key?: string): unknown {
    return key ? this.metadata[key] : this.metadata;
  }
  setSource(s: string): void {
    this.source = s;
  }
  setMetadata(m: Record<string, unknown>): void {
    this.metadata = m;
  }
  get prompt(): string {
    return this.executionState === 'running' ? '*' : String(this.count ?? '');
  }
}

let made = 0;

class Notebook {
  cells: Cell[] = [];
  constructor(...specs: Record<string, unknown>[]) {
    specs.forEach(s => this.insertCell(this.cells.length, s));
  }
  insertCell(index: number, spec: Record<string, unknown>): Cell {
    const cell = new Cell(String(spec.id ?? `made-${++made}`), spec);
    this.cells.splice(index, 0, cell);
    return cell;
  }
  deleteCell(index: number): void {
    this.cells.splice(index, 1);
  }
  transact(fn: () => void): void {
    fn();
  }
  get models() {
    return { length: this.cells.length, get: (i: number) => this.cells[i] };
  }
  byId(id: string): Cell {
    return this.cells.find(c => c.id === id)!;
  }
}

function target(nb: Notebook): ITarget {
  const cells = () => nb.models;
  const router = new OutputRouter(id => nb.cells.find(c => c.id === id) ?? null, 5);
  return { nb, cells, router };
}

const RUN = 'run1';
const AGENT_REQUEST = 'req-agent';

function ranPayload(n: number, cellId: string, msgId: string, code = 'print(1)'): Record<string, unknown> {
  const source = `# nbagent: run by run ${RUN}\n${code}\n`;
  return { after_cell_id: 'agent', source, ran: true, msg_id: msgId, cell_id: cellId, execution_count: n,
           metadata: { nbagent: { run_id: RUN, index: n, call_id: `call-${n}`, ran: true } } };
}

function iopub(type: string, parent: string, content: Record<string, unknown>): any {
  return { header: { msg_type: type, msg_id: `m-${++made}` }, parent_header: { msg_id: parent }, content,
           channel: 'iopub' };
}

const stream = (parent: string, text: string, name = 'stdout') => iopub('stream', parent, { name, text });
const display = (parent: string, data: Record<string, unknown>, displayId?: string) =>
  iopub('display_data', parent, { data, metadata: {}, ...(displayId ? { transient: { display_id: displayId } } : {}) });
const idle = (parent: string) => iopub('status', parent, { execution_state: 'idle' });

function notebook(): Notebook {
  return new Notebook({ id: 'load', source: '%load_ext nbagent' }, { id: 'agent', source: '%%agent\nplot it' },
                      { id: 'mine', source: 'x = 1' });
}

// --------------------------------------------------------------------------------------------------- the tests

describe('run_cell: the cell the agent ran', () => {
  it('is inserted below the agent cell and the cells its run added, with its id and count, running', () => {
    const nb = notebook();
    const t = target(nb);
    expect(applyPayload(t, ranPayload(5, 'c1', 'M1'), AGENT_REQUEST)).toBe('inserted+routed');
    expect(applyPayload(t, ranPayload(6, 'c2', 'M2'), AGENT_REQUEST)).toBe('inserted+routed');
    expect(nb.cells.map(c => c.id)).toEqual(['load', 'agent', 'c1', 'c2', 'mine']);
    const c2 = nb.byId('c2');
    expect(c2.source).toBe(`# nbagent: run by run ${RUN}\nprint(1)\n`);
    expect(c2.metadata).toEqual({ nbagent: { run_id: RUN, index: 6, call_id: 'call-6', ran: true } });
    expect([c2.executionCount, c2.prompt, c2.trusted]).toEqual([6, '*', true]);
    // the run's next cell started: the first one's code ended
    expect(nb.byId('c1').prompt).toBe('5');
  });

  it('gets every IOPub message of its msg id as nbformat outputs, and nothing else', () => {
    const nb = notebook();
    const t = target(nb);
    applyPayload(t, ranPayload(3, 'c1', 'M'), AGENT_REQUEST);
    const png = { 'image/png': 'iVBORw0KGgo=', 'text/plain': '<Figure>' };
    const msgs = [
      stream('M', 'loading\n'), stream('M', 'done\n'), stream('M', 'careful\n', 'stderr'),
      stream('PERSON', 'a thread of an earlier cell\n'), stream(AGENT_REQUEST, 'the agent cell\'s own output\n'),
      display('M', png),
      iopub('execute_result', 'M', { data: { 'text/plain': '42' }, metadata: {}, execution_count: 3 }),
      iopub('error', 'M', { ename: 'KeyError', evalue: "'Revenue'", traceback: ['Traceback...', "KeyError: 'Revenue'"] }),
      iopub('execute_input', 'M', { code: 'x', execution_count: 3 })
    ];
    const routed = msgs.map(m => t.router.handle(m));
    expect(routed).toEqual([true, true, true, false, false, true, true, true, true]);
    expect(nb.byId('c1').outputs.items).toEqual([
      { output_type: 'stream', name: 'stdout', text: 'loading\ndone\n' },
      { output_type: 'stream', name: 'stderr', text: 'careful\n' },
      { output_type: 'display_data', data: png, metadata: {} },
      { output_type: 'execute_result', data: { 'text/plain': '42' }, metadata: {}, execution_count: 3 },
      { output_type: 'error', ename: 'KeyError', evalue: "'Revenue'",
        traceback: ['Traceback...', "KeyError: 'Revenue'"] }
    ]);
    for (const id of ['load', 'agent', 'mine']) {
      expect(nb.byId(id).outputs.items).toEqual([]);
    }
  });

  it('updates displays by display id, and a display id shown again updates the earlier output', () => {
    const nb = notebook();
    const t = target(nb);
    applyPayload(t, ranPayload(3, 'c1', 'M'), AGENT_REQUEST);
    t.router.handle(display('M', { 'text/plain': '0%' }, 'progress'));
    t.router.handle(stream('M', 'working\n'));
    t.router.handle(iopub('update_display_data', 'M', { data: { 'text/plain': '50%' }, metadata: {},
                                                        transient: { display_id: 'progress' } }));
    expect(nb.byId('c1').outputs.items.map(o => o.data ?? o.text)).toEqual([{ 'text/plain': '50%' }, 'working\n']);
    // a later cell of the person updates the same display: the agent's cell shows it (as JupyterLab does)
    t.router.handle(iopub('update_display_data', 'PERSON', { data: { 'text/plain': '100%' }, metadata: {},
                                                             transient: { display_id: 'progress' } }));
    t.router.handle(display('M', { 'text/plain': 'again' }, 'progress'));
    const items = nb.byId('c1').outputs.items;
    expect(items.map(o => (o.data as any)?.['text/plain'] ?? o.text)).toEqual(['again', 'working\n', 'again']);
    expect(items.every(o => !('transient' in o))).toBe(true);
  });

  it('clears its outputs at clear_output, at the next output when told to wait', () => {
    const nb = notebook();
    const t = target(nb);
    applyPayload(t, ranPayload(3, 'c1', 'M'), AGENT_REQUEST);
    t.router.handle(stream('M', 'step 1\n'));
    t.router.handle(iopub('clear_output', 'M', { wait: true }));
    expect(nb.byId('c1').outputs.items).toHaveLength(1);
    t.router.handle(display('M', { 'text/plain': 'frame 2' }, 'anim'));
    t.router.handle(iopub('update_display_data', 'M', { data: { 'text/plain': 'frame 3' }, metadata: {},
                                                        transient: { display_id: 'anim' } }));
    expect(nb.byId('c1').outputs.items.map(o => (o.data as any)['text/plain'])).toEqual(['frame 3']);
    t.router.handle(iopub('clear_output', 'M', { wait: false }));
    expect(nb.byId('c1').outputs.items).toEqual([]);
  });

  it('stops running when the agent\'s request goes idle, and keeps late output of its threads', () => {
    const nb = notebook();
    const t = target(nb);
    applyPayload(t, ranPayload(3, 'c1', 'M'), AGENT_REQUEST);
    t.router.handle(idle('OTHER')); // a widget click's request, while the agent waits
    expect(nb.byId('c1').prompt).toBe('*');
    t.router.handle(idle(AGENT_REQUEST));
    expect(nb.byId('c1').prompt).toBe('3');
    expect(t.router.handle(stream('M', 'late, from a thread\n'))).toBe(true);
    expect(nb.byId('c1').outputs.items[0].text).toBe('late, from a thread\n');
  });

  it('stops running when the run\'s live view shows the call\'s step ended', () => {
    const nb = notebook();
    const t = target(nb);
    applyPayload(t, ranPayload(3, 'c1', 'M'), AGENT_REQUEST);
    const view = (status: string) => iopub('comm_msg', AGENT_REQUEST, { comm_id: 'w', data: { method: 'update',
      state: { view: { steps: [{ kind: 'model', status: 'ok' }, { kind: 'tool', call_id: 'call-3', status }] } } } });
    t.router.handle(view('running'));
    t.router.handle(iopub('comm_msg', AGENT_REQUEST, { comm_id: 'x', data: { method: 'update', state: { value: 1 } } }));
    expect(nb.byId('c1').prompt).toBe('*');
    t.router.handle(view('failed'));
    expect(nb.byId('c1').prompt).toBe('3');
  });

  it('drops the messages of a cell the person deleted, without an error', () => {
    const nb = notebook();
    const t = target(nb);
    applyPayload(t, ranPayload(3, 'c1', 'M'), AGENT_REQUEST);
    nb.deleteCell(nb.cells.findIndex(c => c.id === 'c1'));
    expect(() => {
      t.router.handle(stream('M', 'into the void\n'));
      t.router.handle(iopub('update_display_data', 'M', { data: {}, metadata: {}, transient: { display_id: 'x' } }));
      t.router.handle(idle(AGENT_REQUEST));
    }).not.toThrow();
    expect(t.router.routed).toEqual([]);
    expect(nb.cells.flatMap(c => c.outputs.items)).toEqual([]);
  });

  it('keeps a bounded number of routes', () => {
    const nb = notebook();
    const t = target(nb);
    for (let i = 1; i <= 8; i++) {
      applyPayload(t, ranPayload(i, `c${i}`, `M${i}`), `req${i}`);
    }
    expect(t.router.routed).toEqual(['M4', 'M5', 'M6', 'M7', 'M8']);
    expect(nb.byId('c1').prompt).toBe('1'); // evicted: no longer shown as running
    expect(t.router.handle(stream('M1', 'too late\n'))).toBe(false);
  });

  it('is inserted once when the payload comes twice', () => {
    const nb = notebook();
    const t = target(nb);
    applyPayload(t, ranPayload(3, 'c1', 'M'), AGENT_REQUEST);
    expect(applyPayload(t, ranPayload(3, 'c1', 'M'), AGENT_REQUEST)).toBe('routed');
    expect(nb.cells.filter(c => c.id === 'c1')).toHaveLength(1);
  });

  it('a payload without ran is a proposed cell: inserted, not run, no id of the kernel\'s', () => {
    const nb = notebook();
    const t = target(nb);
    const { ran: _r, msg_id: _m, cell_id: _c, execution_count: _n, ...proposal } = ranPayload(3, 'c1', 'M');
    expect(applyPayload(t, proposal, AGENT_REQUEST)).toBe('inserted');
    const cell = nb.cells[2];
    expect([cell.id === 'c1', cell.executionCount, cell.prompt, t.router.routed]).toEqual([false, null, '', []]);
  });
});

describe('replace_cell and undo', () => {
  it('replace: new source and metadata, outputs cleared, the new msg id routed into the same cell', () => {
    const nb = notebook();
    const t = target(nb);
    applyPayload(t, ranPayload(3, 'c1', 'M1', "df['Revenue']"), AGENT_REQUEST);
    t.router.handle(iopub('error', 'M1', { ename: 'KeyError', evalue: "'Revenue'", traceback: [] }));
    const metadata = { nbagent: { run_id: RUN, index: 2, ran: true, version: 2, replaces_sha256: 'abc' } };
    const source = `# nbagent: run by run ${RUN}\ndf.groupby('region').revenue.sum().plot.bar()\n`;
    expect(applyPayload(t, { action: 'replace', cell_id: 'c1', source, metadata, ran: true, msg_id: 'M2',
                             execution_count: 4 }, AGENT_REQUEST)).toBe('replaced');
    const cell = nb.byId('c1');
    expect([cell.source, cell.metadata, cell.outputs.items, cell.prompt]).toEqual([source, metadata, [], '*']);
    t.router.handle(display('M2', { 'image/png': 'iVBOR', 'text/plain': '<Figure>' }));
    expect(t.router.handle(stream('M1', 'old run, late\n'))).toBe(false);
    expect(cell.outputs.items.map(o => o.output_type)).toEqual(['display_data']);
    t.router.handle(idle(AGENT_REQUEST));
    expect(cell.prompt).toBe('4');
    expect(nb.cells.map(c => c.id)).toEqual(['load', 'agent', 'c1', 'mine']);
  });

  it('replace of a cell that is gone changes nothing', () => {
    const nb = notebook();
    const t = target(nb);
    expect(applyPayload(t, { action: 'replace', cell_id: 'nope', source: 'x', metadata: {}, ran: true,
                             msg_id: 'M2', execution_count: 4 })).toBe('missing');
    expect(t.router.routed).toEqual([]);
  });

  it('remove deletes the cells by id; restore puts the old code back and clears what the new code showed', () => {
    const nb = notebook();
    const t = target(nb);
    applyPayload(t, ranPayload(3, 'c1', 'M1', 'a = 1'), AGENT_REQUEST);
    applyPayload(t, ranPayload(4, 'c2', 'M2', 'b = 2'), AGENT_REQUEST);
    t.router.handle(stream('M2', 'b\n'));
    const old = { source: 'old code\n', metadata: { nbagent: { run_id: 'r0', index: 1 } } };
    expect(applyPayload(t, { action: 'restore', cell_id: 'c2', ...old })).toBe('restored');
    const c2 = nb.byId('c2');
    expect([c2.source, c2.metadata, c2.outputs.items, c2.prompt]).toEqual([old.source, old.metadata, [], '']);
    expect(t.router.handle(stream('M2', 'late\n'))).toBe(false);
    expect(applyPayload(t, { action: 'remove', cell_ids: ['c1', 'gone-already'] })).toBe('removed 1');
    expect(nb.cells.map(c => c.id)).toEqual(['load', 'agent', 'c2', 'mine']);
  });

  it('done ends the running state of its msg id', () => {
    const nb = notebook();
    const t = target(nb);
    applyPayload(t, ranPayload(3, 'c1', 'M1'), AGENT_REQUEST);
    expect(applyPayload(t, { action: 'done', msg_id: 'M1' })).toBe('done');
    expect(nb.byId('c1').prompt).toBe('3');
  });
});

describe('outputOf', () => {
  it('makes outputs as JupyterLab\'s OutputArea does, without the routing-only transient', () => {
    expect(outputOf(iopub('update_display_data', 'M', { data: { a: 1 }, metadata: {}, transient: { display_id: 'd' } })))
      .toEqual({ output_type: 'display_data', data: { a: 1 }, metadata: {} });
    expect(outputOf(iopub('status', 'M', { execution_state: 'idle' }))).toBeNull();
    expect(outputOf(iopub('clear_output', 'M', { wait: false }))).toBeNull();
  });
});

// ------------------------------------------------------------------------------------ the plugin in a fake Lab

class Signal<T> {
  private slots: ((sender: unknown, args: T) => void)[] = [];
  connect(fn: (sender: unknown, args: T) => void): boolean {
    this.slots.push(fn);
    return true;
  }
  emit(args: T): void {
    this.slots.forEach(fn => fn(this, args));
  }
}

describe('the plugin', () => {
  it('routes a kernel\'s IOPub messages into the cell its comm named, and lets go when a person runs it', async () => {
    const nb = notebook();
    const targets = new Map<string, (comm: unknown, msg: any) => void>();
    const kernel = {
      registerCommTarget: (name: string, cb: (comm: unknown, msg: any) => void) => targets.set(name, cb),
      iopubMessage: new Signal<any>(),
      anyMessage: new Signal<any>()
    };
    const panel = {
      sessionContext: { session: { kernel }, kernelChanged: new Signal<any>() },
      content: { model: { sharedModel: nb, cells: nb.models } }
    };
    const app = { shell: { widgets: () => [panel] } };
    const cells = (plugins as any[]).find(p => p.id === 'nbagent-labextension:cells');
    cells.activate(app);
    const open = targets.get(COMM_TARGET)!;
    const sent = (msgId: string, cellId: string) => kernel.anyMessage.emit({ direction: 'send',
      msg: { header: { msg_type: 'execute_request', msg_id: msgId }, metadata: { cellId } } });
    sent(AGENT_REQUEST, 'agent'); // the person runs the %%agent cell
    kernel.iopubMessage.emit(iopub('execute_input', AGENT_REQUEST, { code: '%%agent', execution_count: 6 }));
    open({}, { content: { data: ranPayload(7, 'c1', 'M') }, parent_header: { msg_id: AGENT_REQUEST } });
    kernel.iopubMessage.emit(stream('M', 'hello\n'));
    nb.byId('agent').executionCount = 7; // what JupyterLab takes from ipykernel's execute_reply
    kernel.iopubMessage.emit(idle(AGENT_REQUEST));
    const cell = nb.byId('c1');
    expect([cell.outputs.items[0].text, cell.prompt]).toEqual(['hello\n', '7']);
    await new Promise(resolve => setTimeout(resolve, 0));
    expect(nb.byId('agent').prompt).toBe('6'); // the count its execute_input announced, not the agent's cell's
    // on a loaded machine the execute_reply (shell channel) may come after the idle (IOPub): JupyterLab then sets
    // the reply's count later, and the %%agent cell gets its own back after the reply
    nb.byId('agent').executionCount = 7;
    kernel.anyMessage.emit({ direction: 'recv',
      msg: { header: { msg_type: 'execute_reply', msg_id: 'r1' }, parent_header: { msg_id: AGENT_REQUEST } } });
    await new Promise(resolve => setTimeout(resolve, 0));
    expect(nb.byId('agent').prompt).toBe('6');
    // the person runs the cell: its outputs are that run's; a late message of M stays out
    sent('req-person', 'c1');
    cell.outputs.clear();
    kernel.iopubMessage.emit(stream('M', 'late\n'));
    expect(cell.outputs.items).toEqual([]);
  });
});

// --------------------------------------------------------------------------------------- a re-run's supersede

describe('a re-run of an %%agent cell supersedes the cells its earlier runs ran', () => {
  const RUN2 = 'run2';
  const newCell = (n: number, cellId: string): Record<string, unknown> => {
    const p = ranPayload(n, cellId, `M-${cellId}`);
    return { ...p, metadata: { nbagent: { run_id: RUN2, index: n, call_id: `nb${n}_0`, ran: true } } };
  };

  it('removes the unchanged ones, keeps an edited one as the person\'s, and puts the new cells in their place', () => {
    const nb = notebook();
    const t: ITarget = { ...target(nb), places: new Map() };
    applyPayload(t, ranPayload(3, 'old1', 'M1'), AGENT_REQUEST);
    applyPayload(t, ranPayload(4, 'old2', 'M2', 'print(2)'), AGENT_REQUEST);
    nb.byId('old2').setSource('print(2)\n# mine\n'); // the person edits the second
    // the person moves both below their own cell
    const moved = nb.cells.splice(2, 2);
    nb.cells.push(...moved);
    expect(nb.cells.map(c => c.id)).toEqual(['load', 'agent', 'mine', 'old1', 'old2']);
    const said = applyPayload(t, { action: 'supersede', agent_cell_id: 'agent', run_id: RUN2,
      cells: [{ cell_id: 'old1', source: nb.byId('old1').source + '\n' }, { cell_id: 'old2', source: 'x' },
              { cell_id: 'deleted', source: 'y' }] });
    expect(said).toBe('superseded 1, kept 1');
    expect(nb.cells.map(c => c.id)).toEqual(['load', 'agent', 'mine', 'old2']);
    expect((nb.byId('old2').metadata.nbagent as any).edited).toBe(true);
    applyPayload(t, newCell(5, 'new1'), AGENT_REQUEST);
    applyPayload(t, newCell(6, 'new2'), AGENT_REQUEST);
    expect(nb.cells.map(c => c.id)).toEqual(['load', 'agent', 'mine', 'new1', 'new2', 'old2']);
  });

  it('with nothing unchanged removes nothing and places nothing elsewhere', () => {
    const nb = notebook();
    const t: ITarget = { ...target(nb), places: new Map() };
    expect(applyPayload(t, { action: 'supersede', run_id: RUN2, cells: [{ cell_id: 'mine', source: 'x = 1' },
      { cell_id: 7 }] })).toBe('superseded 0, kept 0'); // a person's cell (no nbagent metadata) is never touched
    applyPayload(t, newCell(5, 'new1'), AGENT_REQUEST);
    expect(nb.cells.map(c => c.id)).toEqual(['load', 'agent', 'new1', 'mine']);
  });

  it('puts the new cells at the top when the old ones were there', () => {
    const nb = notebook();
    const t: ITarget = { ...target(nb), places: new Map() };
    applyPayload(t, ranPayload(3, 'old1', 'M1'), AGENT_REQUEST);
    nb.cells.unshift(...nb.cells.splice(2, 1));
    applyPayload(t, { action: 'supersede', run_id: RUN2, cells: [{ cell_id: 'old1', source: nb.byId('old1').source }] });
    applyPayload(t, newCell(5, 'new1'), AGENT_REQUEST);
    expect(nb.cells.map(c => c.id)).toEqual(['new1', 'load', 'agent', 'mine']);
  });
});

describe('a re-run in a notebook whose cell ids changed', () => {
  it('finds the agent\'s old cell by its code, and with by_request never takes a cell known by its id', () => {
    const nb = notebook();
    const t: ITarget = { ...target(nb), places: new Map() };
    applyPayload(t, ranPayload(3, 'renamed', 'M1'), AGENT_REQUEST); // the log knew it as 'old1'
    applyPayload(t, ranPayload(4, 'other', 'M2', 'print(2)'), AGENT_REQUEST); // another %%agent cell's, by its id
    const source = nb.byId('renamed').source;
    expect(applyPayload(t, { action: 'supersede', run_id: 'run2', by_request: true,
      cells: [{ cell_id: 'old1', source }, { cell_id: 'other', source: nb.byId('other').source }] }))
      .toBe('superseded 1, kept 0');
    expect(nb.cells.map(c => c.id)).toEqual(['load', 'agent', 'other', 'mine']);
  });
});
