/**
 * nbagent-labextension:cells — puts the code cells an agent writes into the notebook.
 *
 * The kernel opens a comm on the target `nbagent.cells`; this plugin registers that target on every notebook's
 * kernel connection. Its data is one of:
 *   - {after_cell_id, source, metadata}: a proposed cell (`insert_code_cell`), inserted (not executed) below the
 *     agent's cell, after any cell the same run inserted before, so several cells keep their order. The same
 *     placement is what `nbagent run` does in a headless run.
 *   - the same with {ran: true, msg_id: M, cell_id, execution_count} (`run_cell`, sent before the code runs): the
 *     cell is inserted there with that id and execution count, shows as running, and every IOPub message of the
 *     kernel whose parent msg_id is M goes into its outputs (outputs.ts).
 *   - {action: "replace", cell_id, source, metadata, ran: true, msg_id: M, execution_count} (`replace_cell`): that
 *     cell takes the new source and metadata, its outputs are cleared, and M's messages go into it.
 *   - {action: "remove", cell_ids} and {action: "restore", cell_id, source, metadata} (an undo): the cells go; the
 *     replaced cell gets its old source and metadata back (its outputs, made by the code undone, are cleared).
 *   - {action: "done", msg_id: M} (optional, no kernel sends it yet): M's code ended; its cell shows its execution
 *     count again. Without it, that happens when the run's live view shows the call's step ended (outputs.ts).
 *   - {action: "supersede", agent_cell_id, run_id, cells: [{cell_id, source}]} (a re-run of an `%%agent` cell, sent
 *     just before its new run writes its first cell; nbagent/ipython/rerun.py): each listed cell the agent ran whose
 *     source is still the one listed goes, and the new run's cells are put where the first of them was; a listed
 *     cell the person changed stays, marked as theirs (`metadata.nbagent.edited`). The kernel refuses to run the
 *     removed cells' requests that Run All had already queued. A listed id the notebook lacks (its ids changed:
 *     saved by a front end that drops them) is looked for by its code; with `by_request` (the kernel found the
 *     earlier runs by the request's text, not the cell's id) only so.
 * A cell the person deleted meanwhile is skipped quietly.
 *
 * The notebook objects are used through the few members needed (duck-typed), so the extension needs no
 * dependency on @jupyterlab/notebook: JupyterLab provides the objects at run time.
 */

import { IApp, ISignal, onNotebooks } from './app';
import { ICodeCellLike, IIOPubMessage, OutputRouter, parentOf } from './outputs';
import { UNDO_EVENT } from './view';
import records from './records';
import undo from './undo';
import waiting from './waiting';

export const COMM_TARGET = 'nbagent.cells';

export interface ICellRequest {
  after_cell_id: string | null;
  source: string;
  metadata: { nbagent?: { run_id?: string | null; index?: number } } & Record<string, unknown>;
  ran?: boolean;
  msg_id?: string;
  cell_id?: string;
  execution_count?: number | null;
}

export interface ICellAction {
  action: 'replace' | 'remove' | 'restore' | 'done' | 'supersede';
  cell_id?: string;
  cell_ids?: string[];
  agent_cell_id?: string;
  run_id?: string;
  by_request?: boolean;
  cells?: { cell_id?: unknown; source?: unknown }[];
  source?: string;
  metadata?: Record<string, unknown>;
  msg_id?: string;
  execution_count?: number | null;
}

interface ISharedCell {
  id?: string;
  source?: string;
  getId?(): string;
  getSource?(): string;
  getMetadata(key?: string): unknown;
  setSource?(source: string): void;
  setMetadata?(metadata: Record<string, unknown>): void;
  transact?(fn: () => void): void;
}

export interface ISharedNotebook {
  cells: ISharedCell[];
  insertCell(index: number, cell: Record<string, unknown>): unknown;
  deleteCell?(index: number): void;
  transact?(fn: () => void): void;
}

export interface ICellModelList {
  length: number;
  get(index: number): ICodeCellLike & { sharedModel?: ISharedCell };
}

interface IKernel {
  registerCommTarget(name: string, cb: (comm: unknown, msg: ICommOpen) => void): void;
  requestExecute?(content: { code: string; silent?: boolean; store_history?: boolean }): unknown;
  iopubMessage?: ISignal<IIOPubMessage>;
  anyMessage?: ISignal<{ msg: ISentMessage; direction: string }>;
}

interface ICommOpen {
  content: { data: unknown };
  parent_header?: unknown;
}

interface ISentMessage {
  header?: { msg_type?: string; msg_id?: string };
  parent_header?: { msg_id?: string };
  metadata?: { cellId?: unknown };
}

interface INotebookLike {
  node?: HTMLElement;
  sessionContext?: {
    session?: { kernel?: IKernel | null } | null;
    kernelChanged: ISignal<{ newValue: IKernel | null }>;
    ready?: Promise<void>;
  };
  content?: {
    model?: { sharedModel?: ISharedNotebook; cells?: ICellModelList } | null;
    widgets?: readonly { node: HTMLElement }[];
    activeCellIndex?: number;
    scrollToItem?(index: number, align?: string): unknown;
  };
}

/**
 * Where a proposed cell goes: below the agent's cell, after the cells its run already inserted. `after`: the cell
 * the run's cells follow instead (where the cells it superseded were; null: the top of the notebook).
 */
export function insertionIndex(nb: ISharedNotebook, request: ICellRequest, after?: string | null): number {
  const cells = nb.cells;
  const anchor = after === undefined || (after !== null && indexOfCell(nb, after) < 0) ? request.after_cell_id : after;
  let index = anchor === null ? 0 : cells.length;
  for (let i = 0; i < cells.length && anchor !== null; i++) {
    if (idOf(cells[i]) === anchor) {
      index = i + 1;
      break;
    }
  }
  const run = request.metadata?.nbagent?.run_id;
  while (index < cells.length && run) {
    const meta = cells[index].getMetadata('nbagent') as { run_id?: string } | undefined;
    if (!meta || meta.run_id !== run) {
      break;
    }
    index++;
  }
  return index;
}

export function insertCell(nb: ISharedNotebook, request: ICellRequest, after?: string | null): number {
  const index = insertionIndex(nb, request, after);
  const cell: Record<string, unknown> = { cell_type: 'code', source: request.source, metadata: request.metadata ?? {} };
  if (request.ran && typeof request.cell_id === 'string' && request.cell_id) {
    cell.id = request.cell_id; // the kernel named it: its outputs and later replace/undo find it by this id
    cell.execution_count = typeof request.execution_count === 'number' ? request.execution_count : null;
    cell.outputs = [];
  }
  nb.insertCell(index, cell);
  return index;
}

function idOf(cell: ISharedCell): string | undefined {
  return cell.id ?? cell.getId?.();
}

export function indexOfCell(nb: ISharedNotebook, cellId: string): number {
  return nb.cells.findIndex(cell => idOf(cell) === cellId);
}

/** The code cell model with this id in the notebook now (null: none, e.g. the person deleted it). */
export function findCell(cells: ICellModelList | null | undefined, cellId: string): ICodeCellLike | null {
  for (let i = 0; cells && i < cells.length; i++) {
    const cell = cells.get(i);
    if (cell?.id === cellId) {
      return cell.type === undefined || cell.type === 'code' ? cell : null;
    }
  }
  return null;
}

function callOf(metadata: unknown): string | null {
  const id = (metadata as { nbagent?: { call_id?: unknown } } | null | undefined)?.nbagent?.call_id;
  return typeof id === 'string' && id ? id : null;
}

function isRequest(data: unknown): data is ICellRequest {
  const d = data as ICellRequest;
  return !!d && typeof d === 'object' && typeof d.source === 'string' && !('action' in d);
}

function isAction(data: unknown): data is ICellAction {
  const d = data as ICellAction;
  return !!d && typeof d === 'object' && typeof d.action === 'string';
}

/**
 * The notebook a payload acts on: its shared model, its cell models, the router of its kernel's outputs, and where
 * the cells of a run that superseded others go (run id -> the cell they follow; null: the top).
 */
export interface ITarget {
  nb: ISharedNotebook;
  cells: () => ICellModelList | null | undefined;
  router: OutputRouter;
  places?: Map<string, string | null>;
}

function sourceOf(cell: ISharedCell): string {
  return cell.getSource?.() ?? cell.source ?? '';
}

/** tools/cell_text.same_source: the source the log recorded, trailing blank space aside (its six ASCII characters,
 * runner_cells.BLANK, not trimEnd's: the kernel and the page must agree on what the person changed). */
export function sameSource(a: string, b: string): boolean {
  const blank = /[ \t\n\r\f\v]+$/;
  return a.replace(blank, '') === b.replace(blank, '');
}

/**
 * A re-run's `supersede` (see the top of this file): the listed cells still as the agent wrote them go, a changed
 * one is marked as the person's, and the run's cells will go where the first removed one was. Returns what was done.
 */
export function supersede(target: ITarget, data: ICellAction): string {
  const { nb, router } = target;
  const listed = (Array.isArray(data.cells) ? data.cells : []).filter(
    c => typeof c?.cell_id === 'string' && typeof c?.source === 'string') as { cell_id: string; source: string }[];
  const gone: number[] = [];
  let kept = 0;
  for (const c of listed) {
    let at = indexOfCell(nb, c.cell_id);
    if (at >= 0 && data.by_request === true) {
      continue; // found by the request's text: a cell still known by its id is another %%agent cell's
    }
    if (at < 0) { // the notebook's ids changed (saved by a front end that drops them): the agent's cell by its code
      at = nb.cells.findIndex((cell, i) => !gone.includes(i) && sameSource(sourceOf(cell), c.source)
        && (cell.getMetadata('nbagent') as { ran?: unknown } | undefined)?.ran === true);
    }
    const shared = at >= 0 ? nb.cells[at] : undefined;
    const meta = shared?.getMetadata('nbagent') as Record<string, unknown> | undefined;
    if (!shared || !meta || typeof meta !== 'object' || meta.ran !== true) {
      continue; // deleted, or made the person's own (its nbagent metadata taken out)
    }
    if (sameSource(sourceOf(shared), c.source)) {
      gone.push(at);
    } else if (meta.edited !== true && shared.setMetadata) {
      const all = (shared.getMetadata() ?? {}) as Record<string, unknown>;
      shared.setMetadata({ ...all, nbagent: { ...meta, edited: true } });
      kept++;
    }
  }
  if (!gone.length) {
    return `superseded 0, kept ${kept}`;
  }
  gone.sort((a, b) => a - b);
  let above = gone[0] - 1;
  while (above >= 0 && gone.includes(above)) {
    above--;
  }
  const place = above >= 0 ? idOf(nb.cells[above]) ?? null : null;
  if (typeof data.run_id === 'string' && data.run_id) {
    target.places?.set(data.run_id, place);
  }
  const ids = gone.map(i => idOf(nb.cells[i])).filter((id): id is string => !!id);
  ids.forEach(id => router.forgetCell(id));
  const remove = (): void => [...gone].reverse().forEach(i => nb.deleteCell?.(i));
  if (nb.transact) {
    nb.transact(remove);
  } else {
    remove();
  }
  return `superseded ${gone.length}, kept ${kept}`;
}

function setCell(target: ITarget, cellId: string, source: string, metadata: Record<string, unknown>): boolean {
  const at = indexOfCell(target.nb, cellId);
  const shared = at >= 0 ? target.nb.cells[at] : undefined;
  if (!shared?.setSource || !shared.setMetadata) {
    return false;
  }
  const set = (): void => {
    shared.setSource!(source);
    shared.setMetadata!(metadata);
  };
  if (shared.transact) {
    shared.transact(set);
  } else {
    set();
  }
  return true;
}

/**
 * One payload of the comm `nbagent.cells` (see the top of this file). `requestId` is the msg id of the request the
 * comm came in answer to (the %%agent cell's execution): its idle ends the running state of the cells it ran.
 * Returns what was done, for tests; never throws for cells that are not there.
 */
export function applyPayload(target: ITarget, data: unknown, requestId: string | null = null): string {
  const { nb, router } = target;
  if (isRequest(data)) {
    const ran = data.ran === true && typeof data.msg_id === 'string' && typeof data.cell_id === 'string';
    const callId = callOf(data.metadata);
    if (ran && indexOfCell(nb, data.cell_id!) >= 0) {
      router.start(data.msg_id!, data.cell_id!, requestId, data.execution_count ?? null, callId, data.after_cell_id);
      return 'routed'; // the payload came twice: one cell
    }
    const run = data.metadata?.nbagent?.run_id;
    insertCell(nb, data, run ? target.places?.get(run) : undefined);
    if (ran) {
      router.start(data.msg_id!, data.cell_id!, requestId, data.execution_count ?? null, callId, data.after_cell_id);
      return 'inserted+routed';
    }
    return 'inserted';
  }
  if (!isAction(data)) {
    return 'ignored';
  }
  const cellId = typeof data.cell_id === 'string' ? data.cell_id : '';
  switch (data.action) {
    case 'replace': {
      if (!cellId || typeof data.source !== 'string' || !setCell(target, cellId, data.source, data.metadata ?? {})) {
        return 'missing';
      }
      if (typeof data.msg_id === 'string' && data.msg_id) {
        router.start(data.msg_id, cellId, requestId, data.execution_count ?? null, callOf(data.metadata));
      }
      return 'replaced';
    }
    case 'remove': {
      const ids = Array.isArray(data.cell_ids) ? data.cell_ids.filter(id => typeof id === 'string') : [];
      ids.forEach(id => router.forgetCell(id));
      const gone = ids.map(id => indexOfCell(nb, id)).filter(i => i >= 0).sort((a, b) => b - a);
      const remove = (): void => gone.forEach(i => nb.deleteCell?.(i));
      if (nb.transact) {
        nb.transact(remove);
      } else {
        remove();
      }
      return `removed ${gone.length}`;
    }
    case 'restore': {
      router.forgetCell(cellId);
      if (!cellId || typeof data.source !== 'string' || !setCell(target, cellId, data.source, data.metadata ?? {})) {
        return 'missing';
      }
      const cell = findCell(target.cells(), cellId);
      if (cell?.outputs) {
        cell.outputs.clear(); // made by the code the undo took back
        cell.executionCount = null;
        cell.executionState = 'idle';
      }
      return 'restored';
    }
    case 'done':
      if (typeof data.msg_id === 'string') {
        router.finish(data.msg_id);
      }
      return 'done';
    case 'supersede':
      return supersede(target, data);
    default:
      return 'ignored';
  }
}

const watched = new WeakSet<object>();
const registered = new WeakSet<object>();

function listen(panel: INotebookLike): void {
  const ctx = panel.sessionContext;
  if (!ctx || watched.has(panel as object)) {
    return;
  }
  watched.add(panel as object);
  const cells = (): ICellModelList | null | undefined => panel.content?.model?.cells;
  const register = (kernel: IKernel | null | undefined): void => {
    if (!kernel || registered.has(kernel as object)) {
      return;
    }
    registered.add(kernel as object);
    const router = new OutputRouter(id => findCell(cells(), id));
    const places = new Map<string, string | null>();
    kernel.registerCommTarget(COMM_TARGET, (_comm, msg) => {
      const nb = panel.content?.model?.sharedModel;
      if (nb) {
        applyPayload({ nb, cells, router, places }, msg.content.data, parentOf(msg));
      }
    });
    kernel.iopubMessage?.connect((_, msg) => {
      router.handle(msg);
    });
    // a cell run from this page (a person's run of a cell the agent ran: its outputs are that run's from now on)
    kernel.anyMessage?.connect((_, { msg, direction }) => {
      const cellId = msg?.metadata?.cellId;
      const msgId = msg?.header?.msg_id;
      if (direction === 'send' && msg?.header?.msg_type === 'execute_request' && typeof cellId === 'string'
          && typeof msgId === 'string') {
        router.requested(msgId, cellId);
      }
      const parent = msg?.parent_header?.msg_id;
      if (direction === 'recv' && msg?.header?.msg_type === 'execute_reply' && typeof parent === 'string') {
        router.replied(parent); // (it may come after the request's idle: outputs.ts keepCount)
      }
    });
  };
  register(ctx.session?.kernel);
  ctx.kernelChanged.connect((_, change) => register(change.newValue));
}

function scan(app: IApp): void {
  for (const widget of app.shell.widgets('main')) {
    const panel = widget as INotebookLike;
    if (panel.sessionContext && panel.content && 'model' in (panel.content as object)) {
      listen(panel);
    }
  }
}

/**
 * What the kernel runs, silently (no output, no execution count), before a cell this extension runs: nbagent is
 * loaded in it unless it already is. A record outlives its kernel: after a restart (or a notebook reopened) the
 * new kernel has not run `%load_ext nbagent`, and `%agent` would be "not found". Loading it in the cell itself
 * would not do: `%agent` lines are rewritten into awaits as the cell is read, before `%load_ext` runs.
 */
export const LOAD_NBAGENT = "get_ipython().extension_manager.load_extension('nbagent')";

/** Ask the panel's kernel (once it is there) to load nbagent, ahead of anything queued after this call. */
export async function loadNbagent(panel: INotebookLike): Promise<void> {
  const ctx = panel.sessionContext;
  let kernel = ctx?.session?.kernel;
  if (!kernel && ctx?.ready) {
    await ctx.ready;
    kernel = ctx.session?.kernel;
  }
  kernel?.requestExecute?.({ code: LOAD_NBAGENT, silent: true, store_history: false });
}

/**
 * The record's Undo button (index.ts): insert `%agent undo RUN` in a new cell below the record's cell and run it,
 * as a person would; the notebook keeps that cell, so the undo is as visible as the run it undoes. The kernel is
 * asked to load nbagent first (a no-op when it is loaded), so this works after a restart too.
 */
export function undoBelow(app: IApp, target: Node, runId: string): boolean {
  for (const widget of app.shell.widgets('main')) {
    const panel = widget as INotebookLike;
    const cells = panel.content?.widgets;
    const nb = panel.content?.model?.sharedModel;
    if (!panel.node?.contains(target) || !cells || !nb || !panel.content) {
      continue;
    }
    const at = cells.findIndex(cell => cell.node.contains(target));
    if (at < 0) {
      return false;
    }
    nb.insertCell(at + 1, { cell_type: 'code', source: `%agent undo ${runId}`, metadata: {} });
    const content = panel.content;
    const inserted = nb.cells[at + 1]?.id;
    content.activeCellIndex = at + 1;
    void content.scrollToItem?.(at + 1, 'center'); // where the Undo panel (or why not) will be: in view
    // the load goes to the kernel before the cell's own execute request (the kernel runs them in order)
    void loadNbagent(panel).finally(() => {
      const now = nb.cells.findIndex(cell => cell.id === inserted); // cells may have moved meanwhile
      if (now >= 0) {
        content.activeCellIndex = now;
        void app.commands?.execute('notebook:run-cell')?.then(() => {
          const at = nb.cells.findIndex(cell => cell.id === inserted);
          if (at >= 0) {
            void content.scrollToItem?.(at, 'center'); // its output, drawn now, in view
          }
        });
      }
    });
    return true;
  }
  return false;
}

const plugin = {
  id: 'nbagent-labextension:cells',
  description: 'Inserts the code cells an nbagent run proposes below its %%agent cell.',
  autoStart: true,
  activate: (app: IApp): void => {
    onNotebooks(app, () => scan(app));
    document.addEventListener(UNDO_EVENT, event => answerUndo(app, event as CustomEvent<IUndoClick>));
  }
};

/** What a click on a record's Undo… carries: the run, and where to say what came of it (index.ts). */
export interface IUndoClick {
  run_id?: string;
  done?: (text: string, ok: boolean) => void;
}

/** A click on Undo…: `%agent undo RUN` in a new cell below, run; the click is told where that is, or why not. */
export function answerUndo(app: IApp, event: CustomEvent<IUndoClick>): void {
  const runId = event.detail?.run_id;
  const done = typeof event.detail?.done === 'function' ? event.detail.done : () => undefined;
  if (!runId || !/^[0-9A-Za-z]+$/.test(runId)) {
    done(`not undone: ${JSON.stringify(runId ?? null)} is not a run id`, false);
  } else if (!(event.target instanceof Node) || !undoBelow(app, event.target, runId)) {
    done(`not undone from here: this record is not in a notebook cell of this page; run %agent undo ${runId} `
      + 'in its notebook', false);
  } else {
    done(`↓ %agent undo ${runId} runs in the new cell below: its Undo panel lists each change and asks before any`,
      true);
  }
}

export default [plugin, records, undo, waiting];
