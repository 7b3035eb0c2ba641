/**
 * nbagent-labextension:reproduce — re-running a saved agent notebook as it was recorded, one click away.
 *
 * - A finished run's record (index.ts draws it) gets a **Reproduce** button: a click tells the kernel that the next
 *   run of the record's cell reproduces the record's run (`%agent reproduce RUN --cell CELL`, sent silently, after
 *   nbagent is loaded), then runs that cell. The kernel checks the run against this notebook's log when the cell
 *   runs (nbagent/ipython/reproduce.py): a refusal is one line in the cell.
 * - The notebook's toolbar gets **Reproduce all**: reproduce on (silently: `%agent reproduce on`, or the setting the
 *   notebook's own `%load_ext nbagent` will read), each cell's next run bound to the run its record names, then
 *   Run All (a cell with no record reproduces the newest run the log holds for it). Every `%%agent` cell then reproduces its last recorded run, until `%agent reproduce off`; the first line
 *   of each cell's output says which it does.
 * A reproduction calls no model and asks nobody: the recorded replies and decisions answer.
 *
 * The notebook objects are used through the few members needed (duck-typed), as in cells.ts.
 */

import { Widget } from '@lumino/widgets';

import { IApp } from './app';
import { LOAD_NBAGENT } from './cells';
import type { IRunView } from './view';

export const REPRODUCE_EVENT = 'nbagent-reproduce';
export const REPRODUCIBLE = ['completed', 'completed_with_errors', 'superseded'];

export interface IReproduceClick {
  run_id?: string;
  cell_id?: string;
  done?: (text: string, ok: boolean) => void;
}

export interface IKernelLike {
  requestExecute?(content: { code: string; silent?: boolean; store_history?: boolean; stop_on_error?: boolean }):
    unknown;
}

export interface IPanelLike {
  id?: string;
  node?: HTMLElement;
  toolbar?: { insertItem?(index: number, name: string, widget: Widget): boolean; addItem?(n: string, w: Widget): boolean };
  sessionContext?: { session?: { kernel?: IKernelLike | null } | null; ready?: Promise<void> };
  content?: {
    model?: { cells?: { length: number; get(i: number): ICellModelLike } } | null;
    widgets?: readonly { node: HTMLElement }[];
    activeCellIndex?: number;
    scrollToItem?(index: number, align?: string): unknown;
  };
}

export interface IAppMore extends IApp {
  docRegistry?: { addWidgetExtension(name: string, ext: { createNew(panel: IPanelLike): unknown }): unknown };
  shell: IApp['shell'] & { activateById?(id: string): void };
}

const ID = /^[0-9A-Za-z_-]+$/;

/** What Reproduce all sends first, silently: the mode on, and the run each cell's record names, whether nbagent is
 * loaded yet or not (reproduce.py turn_on). Ids only (`ID`), so the line is plain Python. */
export function reproduceOn(records: Record<string, string>): string {
  const pairs = Object.entries(records).filter(([c, r]) => ID.test(c) && ID.test(r));
  const literal = `{${pairs.map(([c, r]) => `'${c}': '${r}'`).join(', ')}}`;
  return `__import__('nbagent.ipython.reproduce', fromlist=['_']).turn_on(get_ipython(), ${literal})`;
}

const RUN_MIME = 'application/vnd.nbagent.run+json';

interface ICellModelLike {
  id?: string;
  outputs?: { length: number; get(i: number): { toJSON(): { data?: Record<string, unknown> } } };
}

/** The run each cell's record names (its own cell's last finished top-level run there), by cell id. */
export function recordedRuns(cells: { length: number; get(i: number): ICellModelLike }): Record<string, string> {
  const out: Record<string, string> = {};
  for (let c = 0; c < cells.length; c++) {
    const cell = cells.get(c);
    for (let i = 0; cell.id && cell.outputs && i < cell.outputs.length; i++) {
      const view = cell.outputs.get(i).toJSON().data?.[RUN_MIME] as IRunView | undefined;
      if (view && typeof view === 'object' && view.cell_id === cell.id && reproducible(view)) {
        out[cell.id] = String(view.run_id);
      }
    }
  }
  return out;
}

/** Whether a record offers Reproduce: a finished top-level run of a cell (not an undo, which no model answered). */
export function reproducible(view: IRunView): boolean {
  const status = view.superseded_by ? 'superseded' : String(view.status ?? 'running');
  return !!view.run_id && !!view.cell_id && !view.parent_run_id && !view.undoes && REPRODUCIBLE.includes(status);
}

/** The Reproduce button on a record's root (index.ts calls this after drawing the record). */
export function showReproduce(node: HTMLElement, view: IRunView): void {
  node.querySelectorAll('.nbr-reproduce').forEach(e => e.remove());
  const root = node.querySelector('.nbagent-run');
  if (!root || !reproducible(view)) {
    return;
  }
  const runId = String(view.run_id);
  const line = document.createElement('p');
  line.className = 'nbr-reproduce nbr-muted';
  const button = document.createElement('button');
  button.type = 'button';
  button.className = 'nbr-btn nbr-reproduce-button';
  button.textContent = 'Reproduce';
  button.title = `run this cell again as run ${runId} was recorded: its model replies and decisions from the log, `
    + 'no model call, nothing to approve';
  const said = document.createElement('span');
  said.className = 'nbr-reproduce-status';
  said.setAttribute('role', 'status');
  button.addEventListener('click', () => {
    button.disabled = true;
    let answered = false;
    const done = (text: string, ok: boolean): void => {
      answered = true;
      said.textContent = ` ${text}`;
      button.disabled = ok;
    };
    node.dispatchEvent(new CustomEvent(REPRODUCE_EVENT, {
      bubbles: true, detail: { run_id: runId, cell_id: String(view.cell_id), done }
    }));
    if (!answered) {
      done(`nothing on this page can run it: run %agent reproduce ${runId}, then this cell`, false);
    }
  });
  line.append(button, said);
  root.insertBefore(line, root.querySelector(':scope > .nbr-foot'));
}

function send(panel: IPanelLike, code: string): void {
  panel.sessionContext?.session?.kernel?.requestExecute?.({ code, silent: true, store_history: false,
    stop_on_error: false });
}

async function kernelReady(panel: IPanelLike): Promise<boolean> {
  if (!panel.sessionContext?.session?.kernel && panel.sessionContext?.ready) {
    await panel.sessionContext.ready;
  }
  return !!panel.sessionContext?.session?.kernel;
}

function panels(app: IApp): IPanelLike[] {
  return [...app.shell.widgets('main')].map(w => w as IPanelLike).filter(p => p.sessionContext && p.content);
}

/** A record's Reproduce: the cell that holds the record runs again, reproducing the record's run. */
export async function reproduceCell(app: IApp, target: Node, click: IReproduceClick): Promise<string | null> {
  const runId = click.run_id ?? '';
  const cellId = click.cell_id ?? '';
  if (!ID.test(runId) || !ID.test(cellId)) {
    return `not reproduced: ${JSON.stringify(runId)} is not a run id`;
  }
  const panel = panels(app).find(p => p.node?.contains(target));
  const cells = panel?.content?.widgets;
  if (!panel || !cells || !panel.content) {
    return `not reproduced from here: this record is not in a notebook of this page; run %agent reproduce ${runId} `
      + 'in its notebook, then its cell';
  }
  const at = cells.findIndex(cell => cell.node.contains(target));
  if (at < 0) {
    return 'not reproduced: the record is not in a cell';
  }
  if (!(await kernelReady(panel))) {
    return 'not reproduced: the notebook has no kernel';
  }
  // in the kernel's order: nbagent loaded, the cell's next run told to reproduce this run, then the cell
  send(panel, LOAD_NBAGENT);
  send(panel, `%agent reproduce ${runId} --cell ${cellId}`);
  const now = cells.findIndex(cell => cell.node.contains(target));
  panel.content.activeCellIndex = now >= 0 ? now : at;
  await app.commands?.execute('notebook:run-cell');
  return null;
}

/** Reproduce all: the notebook's `%%agent` cells reproduce their recorded runs, and every cell runs. */
export async function reproduceAll(app: IAppMore, panel: IPanelLike): Promise<void> {
  if (!(await kernelReady(panel))) {
    return;
  }
  if (panel.id) {
    app.shell.activateById?.(panel.id); // Run All acts on the current notebook
  }
  // (not loading nbagent: the notebook's own %load_ext does, as Run All reaches it)
  send(panel, reproduceOn(panel.content?.model?.cells ? recordedRuns(panel.content.model.cells) : {}));
  await app.commands?.execute('notebook:run-all-cells');
}

function toolbarButton(app: IAppMore, panel: IPanelLike): Widget {
  const node = document.createElement('button');
  node.type = 'button';
  node.className = 'jp-ToolbarButtonComponent jp-nbagent-ReproduceAll';
  node.textContent = '↻ Reproduce all';
  node.setAttribute('aria-label', 'Reproduce all');
  node.title = 'Run all cells, each %%agent cell reproducing its recorded run from the log: no model call, nothing '
    + 'to approve (until %agent reproduce off)';
  node.addEventListener('click', () => void reproduceAll(app, panel));
  const widget = new Widget({ node });
  widget.addClass('jp-Toolbar-item');
  return widget;
}

const plugin = {
  id: 'nbagent-labextension:reproduce',
  description: 'Reproduce (a record) and Reproduce all (the toolbar): re-run agent cells from their log.',
  autoStart: true,
  activate: (app: IAppMore): void => {
    app.docRegistry?.addWidgetExtension('Notebook', {
      createNew: (panel: IPanelLike) => {
        const widget = toolbarButton(app, panel);
        if (!panel.toolbar?.insertItem?.(10, 'nbagentReproduceAll', widget)) {
          panel.toolbar?.addItem?.('nbagentReproduceAll', widget);
        }
        return widget;
      }
    });
    document.addEventListener(REPRODUCE_EVENT, event => {
      const click = (event as CustomEvent<IReproduceClick>).detail ?? {};
      const done = typeof click.done === 'function' ? click.done : () => undefined;
      if (!(event.target instanceof Node)) {
        return;
      }
      done(`↻ reproducing run ${click.run_id ?? ''} from the log in this cell: no model call`, true);
      void reproduceCell(app, event.target, click).then(why => {
        if (why) {
          done(why, false);
        }
      });
    });
  }
};

export default plugin;
