/**
 * nbagent-labextension:waiting — the way to a card that waits, and the kernel shown busy while an `%%agent` cell runs.
 *
 * A run waits for a person on a card (an approval) or a question in its live view, in the `%%agent` cell's output.
 * Run All scrolls to the last cell it queued, so a card waiting above is off-screen, and reaching it by Tab takes a
 * dozen stops. So:
 *   - the command `nbagent:focus-waiting-card` (Ctrl+Shift+Y, Cmd+Shift+Y on a Mac, anywhere on the page) scrolls
 *     to the first waiting card of the notebook in front and gives its primary control the focus: the Approve
 *     button (then Enter approves), or a question's answer box;
 *   - while a card waits off-screen, a small notice floats at the bottom of the notebook ("‖ nbagent waits: Run a
 *     cell? — Ctrl+Shift+Y"); a click on it does what the shortcut does.
 *
 * The kernel is busy while an `%%agent` cell runs, but JupyterLab's kernel status said Idle: the kernel handles the
 * live view's comm messages while the cell awaits (DESIGN.md 5), each with its own busy and idle, and the page takes
 * the last idle for the kernel's. While a cell whose code starts with `%%agent` is executing in any kernel of the
 * page, the page's `untracked_message_types` (the message types whose status messages JupyterLab does not apply to
 * the kernel's status, set by the server) also holds the comm, completion and subshell requests (JupyterLab 4.6
 * opens a subshell as the cell starts), so their idle no longer overrides the cell's busy; the server's own list is
 * put back when no such cell runs.
 *
 * The notebook objects are used through the few members needed (duck-typed), as in cells.ts.
 */

import { PageConfig } from '@jupyterlab/coreutils';

import { IApp, ISignal, onNotebooks } from './app';

export const FOCUS_COMMAND = 'nbagent:focus-waiting-card';
export const FOCUS_KEYS = ['Accel Shift Y'];
export const KEYS_SAID = /Mac/i.test(typeof navigator === 'undefined' ? '' : navigator.platform) ? '⌘⇧Y' : 'Ctrl+Shift+Y';
export const NOTICE_CLASS = 'jp-nbagent-WaitingNotice';
const CHECK_MS = 400; // how often the notice looks whether a card waits off-screen (a query over one notebook)

/** Message types whose status says nothing of an `%%agent` cell that runs (they arrive while it awaits). */
export const QUIET_WHILE_AGENT = ['comm_msg', 'comm_open', 'comm_close', 'complete_request', 'inspect_request',
  'is_complete_request', 'history_request', 'create_subshell_request', 'delete_subshell_request',
  'list_subshell_request'];

interface ICellWidget {
  node: HTMLElement;
  model?: { sharedModel?: { getSource?(): string } };
}

interface INotebookPanel {
  node: HTMLElement;
  isVisible?: boolean;
  sessionContext?: {
    session?: { kernel?: IKernelLike | null } | null;
    kernelChanged?: ISignal<{ newValue: IKernelLike | null }>;
  };
  content?: {
    node: HTMLElement;
    widgets?: readonly ICellWidget[];
    model?: unknown;
    scrollToItem?(index: number, align?: string): Promise<void> | unknown;
  };
}

interface IMessage {
  header?: { msg_type?: string; msg_id?: string };
  parent_header?: { msg_id?: string };
  content?: { code?: string; execution_state?: string };
}

export interface IKernelLike {
  anyMessage?: ISignal<{ msg: IMessage; direction: string }>;
  statusChanged?: ISignal<string>;
}

export interface IAppWithCommands extends IApp {
  commands?: IApp['commands'] & {
    addCommand?(id: string, options: { label: string; caption?: string; execute: () => unknown }): unknown;
    addKeyBinding?(options: { command: string; keys: string[]; selector: string }): unknown;
  };
}

/** A card or question that waits for a person: a decision group whose primary control still takes input. */
export interface IWaiting {
  card: HTMLElement;
  primary: HTMLElement;
  cellIndex: number;
  question: string;
}

/** The primary control of a decision group: a question's answer box, else the Approve button (null once decided). */
export function primaryOf(card: HTMLElement): HTMLElement | null {
  if (card.getAttribute('aria-label') === 'question') {
    return card.querySelector<HTMLElement>('input.nbv-input:not(:disabled)');
  }
  return card.querySelector<HTMLElement>('button.nbv-approve:not(:disabled)');
}

/** The cards that wait in a notebook, in its cells' order (a cell out of view still has its node). */
export function waitingIn(panel: INotebookPanel): IWaiting[] {
  const cells = panel.content?.widgets ?? [];
  const out: IWaiting[] = [];
  cells.forEach((cell, cellIndex) => {
    for (const card of cell.node.querySelectorAll<HTMLElement>('.nbagent-live .nbv-decide[data-request-id]')) {
      const primary = primaryOf(card);
      if (primary) {
        const question = card.querySelector('.nbv-decide-q')?.textContent ?? 'a decision';
        out.push({ card, primary, cellIndex, question: question.trim() });
      }
    }
  });
  return out;
}

/** The notebook in front: the visible notebook panel of the main area (the first notebook if none says so). */
export function frontNotebook(app: IApp): INotebookPanel | null {
  let first: INotebookPanel | null = null;
  for (const widget of app.shell.widgets('main')) {
    const panel = widget as INotebookPanel;
    if (!panel.content || !panel.sessionContext || !('model' in (panel.content as object))) {
      continue;
    }
    if (panel.isVisible) {
      return panel;
    }
    first = first ?? panel;
  }
  return first;
}

/** Whether `el` is within the notebook's scrolled view (and the window's). */
export function inView(el: HTMLElement, viewport: HTMLElement): boolean {
  const r = el.getBoundingClientRect();
  const v = viewport.getBoundingClientRect();
  const top = Math.max(v.top, 0);
  const bottom = Math.min(v.bottom, window.innerHeight || v.bottom);
  return r.height > 0 && r.bottom > top + 8 && r.top < bottom - 8;
}

/** Scroll to the first card that waits in the notebook in front and focus its primary control; false if none. */
export async function focusWaiting(app: IApp): Promise<boolean> {
  const panel = frontNotebook(app);
  const first = panel ? waitingIn(panel)[0] : undefined;
  if (!panel || !first) {
    return false;
  }
  if (!first.card.isConnected) {
    await panel.content?.scrollToItem?.(first.cellIndex, 'center'); // a windowed notebook attaches it first
  }
  first.card.scrollIntoView?.({ block: 'center' });
  first.primary.focus({ preventScroll: true });
  return true;
}

/** The notice: one per notebook panel, shown while a card waits there out of view. */
export function updateNotice(app: IApp, panel: INotebookPanel): HTMLElement | null {
  let notice = panel.node.querySelector<HTMLButtonElement>(`:scope > .${NOTICE_CLASS}`);
  const waiting = panel.content ? waitingIn(panel) : [];
  const away = waiting.length && !waiting.some(w => inView(w.card, panel.content!.node)) ? waiting[0] : null;
  if (!away) {
    if (notice) {
      notice.hidden = true;
    }
    return notice;
  }
  if (!notice) {
    notice = document.createElement('button');
    notice.type = 'button';
    notice.className = NOTICE_CLASS;
    notice.addEventListener('click', () => void focusWaiting(app));
    panel.node.appendChild(notice);
  }
  const text = `‖ nbagent waits: ${away.question} — ${KEYS_SAID}`;
  if (notice.textContent !== text) {
    notice.textContent = text;
    notice.title = `go to the card that waits (cell ${away.cellIndex + 1} of this notebook): ${KEYS_SAID}`;
  }
  notice.hidden = false;
  return notice;
}

// ------------------------------------------------------------------------------------------------ the kernel busy

const agentCells = new Set<string>(); // msg ids of `%%agent` execute requests not yet idle, over every kernel
const watched = new WeakSet<object>();
let serverList: string | null | undefined; // the server's untracked_message_types, put back when none runs

export const isAgentCode = (code: unknown): boolean => typeof code === 'string' && /^\s*%%agent\b/.test(code);

function applyQuiet(): void {
  if (serverList === undefined) {
    serverList = PageConfig.getOption('untracked_message_types') || null;
  }
  if (!agentCells.size) {
    PageConfig.setOption('untracked_message_types', serverList ?? '[]');
    return;
  }
  let types: string[] = [];
  try {
    types = JSON.parse(serverList ?? '[]') as string[];
  } catch {
    types = [];
  }
  PageConfig.setOption('untracked_message_types', JSON.stringify([...new Set([...types, ...QUIET_WHILE_AGENT])]));
}

/** Follow one kernel's messages: an `%%agent` execute request sent, and the idle that ends it. */
export function watchKernel(kernel: IKernelLike | null | undefined): void {
  if (!kernel?.anyMessage || watched.has(kernel)) {
    return;
  }
  watched.add(kernel);
  const mine = new Set<string>(); // this kernel's `%%agent` requests still running
  // a kernel that dies, restarts or loses its connection sends no idle for its cells: they end with it
  const forget = (): void => {
    let changed = false;
    mine.forEach(id => {
      changed = agentCells.delete(id) || changed;
    });
    mine.clear();
    if (changed) {
      applyQuiet();
    }
  };
  kernel.anyMessage.connect((_, { msg, direction }) => {
    const type = msg.header?.msg_type;
    const state = msg.content?.execution_state;
    if (direction === 'send' && type === 'execute_request' && isAgentCode(msg.content?.code) && msg.header?.msg_id) {
      agentCells.add(msg.header.msg_id);
      mine.add(msg.header.msg_id);
      applyQuiet();
    } else if (direction === 'recv' && type === 'status' && state === 'idle') {
      const id = msg.parent_header?.msg_id ?? '';
      mine.delete(id);
      if (agentCells.delete(id)) {
        applyQuiet();
      }
    } else if (direction === 'recv' && type === 'status' && state === 'restarting') {
      forget();
    }
  });
  kernel.statusChanged?.connect((_, status) => {
    if (['dead', 'restarting', 'autorestarting', 'terminating', 'unknown'].includes(status)) {
      forget();
    }
  });
}

/** The `%%agent` requests the page counts as running (for tests). */
export const agentRequests = (): ReadonlySet<string> => agentCells;

function scan(app: IApp): void {
  for (const widget of app.shell.widgets('main')) {
    const panel = widget as INotebookPanel;
    const ctx = panel.sessionContext;
    if (!ctx || watched.has(ctx)) {
      continue;
    }
    watched.add(ctx);
    watchKernel(ctx.session?.kernel);
    ctx.kernelChanged?.connect((_, change) => watchKernel(change.newValue));
  }
}

const plugin = {
  id: 'nbagent-labextension:waiting',
  description: 'Ctrl+Shift+Y goes to the card an nbagent run waits on; a notice says when one waits off-screen; '
    + 'the kernel shows busy while an %%agent cell runs.',
  autoStart: true,
  activate: (app: IAppWithCommands): void => {
    app.commands?.addCommand?.(FOCUS_COMMAND, {
      label: 'Go to the nbagent card that waits',
      caption: `Scroll to the first card or question an nbagent run waits on and focus its button (${KEYS_SAID})`,
      execute: () => focusWaiting(app)
    });
    app.commands?.addKeyBinding?.({ command: FOCUS_COMMAND, keys: FOCUS_KEYS, selector: 'body' });
    onNotebooks(app, () => scan(app));
    setInterval(() => {
      const panel = frontNotebook(app);
      if (panel) {
        updateNotice(app, panel);
      }
    }, CHECK_MS);
  }
};

export default plugin;
