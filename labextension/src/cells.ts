/**
 * nbagent-labextension:cells — puts the code cells an agent proposes (`insert_code_cell`) into the notebook.
 *
 * The kernel opens a comm on the target `nbagent.cells` with {after_cell_id, source, metadata}; this plugin
 * registers that target on every notebook's kernel connection and inserts a code cell (not executed) below the
 * agent's cell, after any cell the same run inserted before, so several cells keep their order. The same
 * placement is what `nbagent run` does in a headless run.
 *
 * The notebook objects are used through the few members needed (duck-typed), so the extension needs no
 * dependency on @jupyterlab/notebook: JupyterLab provides the objects at run time.
 */

import { IApp, ISignal, onNotebooks } from './app';
import { UNDO_EVENT } from './view';
import records from './records';

export const COMM_TARGET = 'nbagent.cells';

export interface ICellRequest {
  after_cell_id: string | null;
  source: string;
  metadata: { nbagent?: { run_id?: string | null; index?: number } } & Record<string, unknown>;
}

interface ISharedCell {
  id: string;
  getMetadata(key?: string): unknown;
}

export interface ISharedNotebook {
  cells: ISharedCell[];
  insertCell(index: number, cell: Record<string, unknown>): unknown;
}


interface IKernel {
  registerCommTarget(name: string, cb: (comm: unknown, msg: { content: { data: unknown } }) => void): void;
  requestExecute?(content: { code: string; silent?: boolean; store_history?: boolean }): unknown;
}

interface INotebookLike {
  node?: HTMLElement;
  sessionContext?: {
    session?: { kernel?: IKernel | null } | null;
    kernelChanged: ISignal<{ newValue: IKernel | null }>;
    ready?: Promise<void>;
  };
  content?: {
    model?: { sharedModel?: ISharedNotebook } | null;
    widgets?: readonly { node: HTMLElement }[];
    activeCellIndex?: number;
  };
}


/** Where a proposed cell goes: below the agent's cell, after the cells its run already inserted. */
export function insertionIndex(nb: ISharedNotebook, request: ICellRequest): number {
  const cells = nb.cells;
  let index = cells.length;
  for (let i = 0; i < cells.length; i++) {
    if (cells[i].id === request.after_cell_id) {
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

export function insertCell(nb: ISharedNotebook, request: ICellRequest): number {
  const index = insertionIndex(nb, request);
  nb.insertCell(index, { cell_type: 'code', source: request.source, metadata: request.metadata ?? {} });
  return index;
}

function isRequest(data: unknown): data is ICellRequest {
  const d = data as ICellRequest;
  return !!d && typeof d === 'object' && typeof d.source === 'string';
}

const watched = new WeakSet<object>();
const registered = new WeakSet<object>();

function listen(panel: INotebookLike): void {
  const ctx = panel.sessionContext;
  if (!ctx || watched.has(panel as object)) {
    return;
  }
  watched.add(panel as object);
  const register = (kernel: IKernel | null | undefined): void => {
    if (!kernel || registered.has(kernel as object)) {
      return;
    }
    registered.add(kernel as object);
    kernel.registerCommTarget(COMM_TARGET, (_comm, msg) => {
      const nb = panel.content?.model?.sharedModel;
      if (nb && isRequest(msg.content.data)) {
        insertCell(nb, msg.content.data);
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
    // the load goes to the kernel before the cell's own execute request (the kernel runs them in order)
    void loadNbagent(panel).finally(() => {
      const now = nb.cells.findIndex(cell => cell.id === inserted); // cells may have moved meanwhile
      if (now >= 0) {
        content.activeCellIndex = now;
        void app.commands?.execute('notebook:run-cell');
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
    document.addEventListener(UNDO_EVENT, event => {
      const runId = (event as CustomEvent<{ run_id?: string }>).detail?.run_id;
      if (runId && /^[0-9A-Za-z]+$/.test(runId) && event.target instanceof Node) {
        undoBelow(app, event.target, runId);
      }
    });
  }
};

export default [plugin, records];
