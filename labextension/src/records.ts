/**
 * nbagent-labextension:records — every record of a run in an open notebook shows the run's latest state.
 *
 * A run interrupted in one cell and continued in a later one (`%agent approve`, `%agent resume`) leaves two
 * records of it: the first says "interrupted · waiting for approval" while the later one is complete. The kernel
 * updates the first by display id within its session, but a page reload loses display ids; so this plugin works
 * from the notebook's output models alone. Whenever outputs change (and once a notebook is loaded), every output
 * holding `application/vnd.nbagent.run+json` of run X with a lower `revision` than the newest record of X in the
 * notebook takes the newest one's data (all its MIME types, so the text/html fallback agrees).
 *
 * A live view whose run ended also asks (a DOM event from nbagent/ui/run_view.js) to be replaced by its record:
 * after a reload, the view comes back from the kernel but the kernel's final `update_display` cannot find it.
 *
 * And the kernel may send a run's newer record on the comm target `nbagent.records` (`{records: [bundle]}`): an undo
 * in a new kernel (after a restart) cannot reach the outputs an earlier kernel made, so the undone run's record
 * there would still offer Undo… and not say it was undone; every output holding an older record of that run takes
 * the bundle (its JSON, text/html and text/plain).
 *
 * The notebook objects are used through the few members needed (duck-typed), as in cells.ts.
 */

import { IApp, ISignal, onNotebooks } from './app';

export const RUN_MIME = 'application/vnd.nbagent.run+json';
export const FINAL_EVENT = 'nbagent-run-final';


export interface IOutputJSON {
  output_type: string;
  data?: Record<string, unknown>;
  metadata?: Record<string, unknown>;
  [key: string]: unknown;
}

export interface IOutputModel {
  toJSON(): IOutputJSON;
}

export interface IOutputList {
  length: number;
  get(index: number): IOutputModel;
  set(index: number, value: IOutputJSON): void;
  changed?: ISignal<unknown>;
}

export interface ICellModel {
  type?: string;
  outputs?: IOutputList;
}

export interface ICellList {
  length: number;
  get(index: number): ICellModel;
  changed?: ISignal<unknown>;
}

interface IOutputAreaLike {
  node: HTMLElement;
  widgets?: ReadonlyArray<{ node: HTMLElement }>;
}

interface ICellWidgetLike {
  node: HTMLElement;
  model: ICellModel;
  outputArea?: IOutputAreaLike;
}

interface IKernelLike {
  registerCommTarget(name: string, cb: (comm: unknown, msg: { content: { data: unknown } }) => void): void;
}

interface INotebookPanelLike {
  content?: { model?: { cells?: ICellList } | null; widgets?: ReadonlyArray<ICellWidgetLike>; modelChanged?: ISignal<unknown> };
  context?: { ready?: Promise<unknown> };
  sessionContext?: {
    session?: { kernel?: IKernelLike | null } | null;
    kernelChanged?: ISignal<{ newValue: IKernelLike | null }>;
  };
}

export const RECORDS_TARGET = 'nbagent.records';


interface IRecordRef {
  outputs: IOutputList;
  index: number;
  json: IOutputJSON;
  runId: string;
  revision: number;
}

function recordOf(json: IOutputJSON): { runId: string; revision: number } | null {
  const view = json.data?.[RUN_MIME] as { run_id?: unknown; revision?: unknown } | undefined;
  if (!view || typeof view !== 'object' || typeof view.run_id !== 'string' || !view.run_id) {
    return null;
  }
  const revision = typeof view.revision === 'number' && Number.isFinite(view.revision) ? view.revision : -1;
  return { runId: view.run_id, revision };
}

/** Every output of the notebook's cells that holds a run record. */
export function findRecords(cells: ICellList): IRecordRef[] {
  const found: IRecordRef[] = [];
  for (let c = 0; c < cells.length; c++) {
    const outputs = cells.get(c).outputs;
    if (!outputs) {
      continue;
    }
    for (let i = 0; i < outputs.length; i++) {
      const json = outputs.get(i).toJSON();
      const rec = recordOf(json);
      if (rec) {
        found.push({ outputs, index: i, json, ...rec });
      }
    }
  }
  return found;
}

/**
 * Bring every record of a run up to the newest one (the highest revision) in these cells; returns how many
 * outputs were replaced. A record without a revision counts as the oldest.
 */
export function syncRecords(cells: ICellList): number {
  const records = findRecords(cells);
  const newest = new Map<string, IRecordRef>();
  for (const r of records) {
    const best = newest.get(r.runId);
    if (!best || r.revision > best.revision) {
      newest.set(r.runId, r);
    }
  }
  let replaced = 0;
  for (const r of records) {
    const best = newest.get(r.runId)!;
    if (r.revision < best.revision) {
      r.outputs.set(r.index, { ...r.json, data: { ...best.json.data }, metadata: { ...(best.json.metadata ?? {}) } });
      replaced++;
    }
  }
  return replaced;
}

/**
 * A record the kernel sent (a MIME bundle with the run's JSON): every output of these cells holding an older
 * record of that run (a lower revision) takes it. Returns how many outputs were replaced.
 */
export function applyRecord(cells: ICellList, bundle: Record<string, unknown>): number {
  const incoming = recordOf({ output_type: 'display_data', data: bundle });
  if (!incoming) {
    return 0;
  }
  const view = bundle[RUN_MIME] as Record<string, unknown>;
  let replaced = 0;
  for (const r of findRecords(cells)) {
    if (r.runId === incoming.runId && r.revision < incoming.revision) {
      r.outputs.set(r.index, { ...r.json, data: recordOutput(view, bundle).data });
      replaced++;
    }
  }
  return replaced;
}

/**
 * The output that shows a run's record instead of its ended live view. `bundle` is the record the kernel made
 * (the view's `ended` trait: text/html and text/plain beside the JSON), so the saved notebook reads well in
 * nbconvert, GitHub or any viewer without this extension; without one (an older kernel), text/plain says what
 * the record is.
 */
export function recordOutput(view: Record<string, unknown>, bundle?: Record<string, unknown> | null): IOutputJSON {
  const status = String(view.status ?? '').replace(/_/g, ' ');
  const data: Record<string, unknown> = { 'text/plain': `nbagent run ${String(view.run_id ?? '')}: ${status}` };
  for (const [mime, value] of Object.entries(bundle ?? {})) {
    if (typeof mime === 'string' && mime.includes('/') && (typeof value === 'string' || mime === RUN_MIME)) {
      data[mime] = value;
    }
  }
  data[RUN_MIME] = view;
  return { output_type: 'display_data', data, metadata: {} };
}

const watchedPanels = new WeakSet<object>();
const watchedLists = new WeakSet<object>();

function watch(panel: INotebookPanelLike): void {
  const content = panel.content;
  if (!content || watchedPanels.has(panel as object)) {
    return;
  }
  watchedPanels.add(panel as object);
  let busy = false;
  let due = false;
  const sync = (): void => {
    const cells = content.model?.cells;
    if (!cells) {
      return;
    }
    if (busy) {
      due = true;
      return;
    }
    busy = true;
    try {
      hook(cells);
      syncRecords(cells);
    } finally {
      busy = false;
    }
    if (due) {
      due = false;
      queueMicrotask(sync);
    }
  };
  const hook = (cells: ICellList): void => {
    if (!watchedLists.has(cells as object)) {
      watchedLists.add(cells as object);
      cells.changed?.connect(() => sync());
    }
    for (let c = 0; c < cells.length; c++) {
      const outputs = cells.get(c).outputs;
      if (outputs && !watchedLists.has(outputs as object)) {
        watchedLists.add(outputs as object);
        outputs.changed?.connect(() => queueMicrotask(sync));
      }
    }
  };
  content.modelChanged?.connect(() => sync());
  void panel.context?.ready?.then(sync);
  sync();
  listen(panel);
}

const registered = new WeakSet<object>();

/** Records the kernel sends on `nbagent.records` (nbagent/ipython/host.py, after an undo). */
function listen(panel: INotebookPanelLike): void {
  const ctx = panel.sessionContext;
  const register = (kernel: IKernelLike | null | undefined): void => {
    if (!kernel || registered.has(kernel as object)) {
      return;
    }
    registered.add(kernel as object);
    kernel.registerCommTarget(RECORDS_TARGET, (_comm, msg) => {
      const cells = panel.content?.model?.cells;
      const records = (msg.content.data as { records?: unknown } | null)?.records;
      if (cells && Array.isArray(records)) {
        for (const bundle of records) {
          if (bundle && typeof bundle === 'object') {
            applyRecord(cells, bundle as Record<string, unknown>);
          }
        }
      }
    });
  };
  register(ctx?.session?.kernel);
  ctx?.kernelChanged?.connect((_, change) => register(change.newValue));
}

function scan(app: IApp): void {
  for (const widget of app.shell.widgets('main')) {
    const panel = widget as INotebookPanelLike;
    if (panel.content && 'model' in (panel.content as object) && 'widgets' in (panel.content as object)) {
      watch(panel);
    }
  }
}

/** The cell widget and output index whose DOM holds `node` (an ended live view). */
function outputAt(app: IApp, node: Node): { outputs: IOutputList; index: number } | null {
  for (const widget of app.shell.widgets('main')) {
    const cells = (widget as INotebookPanelLike).content?.widgets;
    if (!cells) {
      continue;
    }
    for (const cell of cells) {
      const area = cell.outputArea;
      const outputs = cell.model?.outputs;
      if (!area || !outputs || !cell.node.contains(node)) {
        continue;
      }
      const children = area.widgets ?? [];
      for (let i = 0; i < children.length && i < outputs.length; i++) {
        if (children[i].node.contains(node)) {
          return { outputs, index: i };
        }
      }
    }
  }
  return null;
}

/** The widget model an output shows (its live view), or null. */
function widgetOf(json: IOutputJSON): string | null {
  const view = json.data?.['application/vnd.jupyter.widget-view+json'] as { model_id?: unknown } | undefined;
  return view && typeof view.model_id === 'string' && view.model_id ? view.model_id : null;
}

/** An ended live view's output becomes the run's record (unless the kernel already replaced it). */
export function onFinal(app: IApp, event: Event): void {
  const detail = (event as CustomEvent<{ view?: Record<string, unknown>; bundle?: Record<string, unknown> }>).detail;
  const view = detail?.view;
  const target = event.target as Node | null;
  if (!view || typeof view !== 'object' || !target) {
    return;
  }
  const at = outputAt(app, target);
  if (!at) {
    return;
  }
  // let the kernel's own update_display land first (it carries the text/html fallback too); after a reload it
  // never comes, and the output still holds the live view. Only that very view: a cell run again meanwhile holds
  // its new run's live view at the same index, which must stay (its cards wait there)
  const ended = widgetOf(at.outputs.get(at.index).toJSON());
  setTimeout(() => {
    if (at.index >= at.outputs.length) {
      return;
    }
    const now = widgetOf(at.outputs.get(at.index).toJSON());
    if (now !== null && now === ended) {
      at.outputs.set(at.index, recordOutput(view, detail?.bundle));
    }
  }, 1500);
}

const plugin = {
  id: 'nbagent-labextension:records',
  description: 'Keeps every record of an nbagent run in a notebook at the run\'s latest state.',
  autoStart: true,
  activate: (app: IApp): void => {
    onNotebooks(app, () => scan(app));
    document.addEventListener(FINAL_EVENT, event => onFinal(app, event));
  }
};

export default plugin;
