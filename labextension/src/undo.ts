/**
 * nbagent-labextension:undo — which saved records offer Undo…, as the kernel reads this notebook's log.
 *
 * A record is data in the notebook: any run id can be in it (a cell copied from another notebook, a repository
 * cloned without its logs, a run undone since). So a record draws its Undo… button only once the notebook's kernel
 * said undo can act on that run (nbagent/ipython/undo_offers.py). `%load_ext nbagent` opens the comm
 * `nbagent.undo` to this page; a record asks with a DOM event (`UNDO_ASK_EVENT`, from index.ts, with a callback),
 * this plugin sends `{id, ask: [run ids]}` for the records of that kernel's notebooks, one message per turn of the
 * page, and calls each record back with the kernel's offer: `{undo: true, line, title}` or `{undo: false, why}`.
 * With no kernel running nbagent (not loaded yet, restarted, shut down) a record gets `null`: its Undo… asks (index.ts).
 *
 * The kernel is told of no cell the person deletes, so this plugin also sends, on the same comm, the ids of the cells
 * each notebook of that kernel holds, `{cells: [ids]}`, when the comm opens and whenever the cells change: an undo
 * then says a deleted cell was deleted, instead of claiming it removed or restored it (undo_offers.cells_gone).
 *
 * The notebook objects are used through the few members needed (duck-typed), as in cells.ts.
 */

import { IApp, ISignal, onNotebooks } from './app';
import { UNDO_ASK_EVENT } from './view';

export const UNDO_TARGET = 'nbagent.undo';

export interface IUndoOffer {
  undo: boolean;
  line?: string; // what undoing does, in the kernel's words: "%agent undo RUN undoes this run's changes (1 file)"
  title?: string; // the button's tooltip
  why?: string; // why not: one line
}

export interface IUndoAsk {
  run_id: string;
  answer(offer: IUndoOffer | null): void;
}

export interface IComm {
  send(data: unknown): unknown;
  onMsg: ((msg: { content: { data: unknown } }) => void) | null;
  onClose: ((msg?: unknown) => void) | null;
}

export interface IUndoKernel {
  registerCommTarget(name: string, cb: (comm: IComm, msg: unknown) => void): void;
  statusChanged?: ISignal<string>;
}

export interface ICellListLike {
  length: number;
  get(i: number): { id?: string } | undefined;
  changed?: ISignal<unknown>;
}

interface IPanelLike {
  node: HTMLElement;
  content?: unknown;
  sessionContext?: {
    session?: { kernel?: IUndoKernel | null } | null;
    kernelChanged?: ISignal<{ newValue: IUndoKernel | null }>;
  };
}

interface IAsked extends IUndoAsk {
  node: Element;
  from?: UndoChannel; // the channel whose answer the record shows
}

/** One kernel's comm: asks batched per turn of the page, each answered once, by the latest ask of its record. */
export class UndoChannel {
  private next = 1;
  private queued: IAsked[] = [];
  private readonly sent = new Map<number, IAsked[]>();
  closed = false;

  constructor(private readonly comm: IComm, private readonly latest: (node: Element) => IAsked | undefined) {
    comm.onMsg = msg => this.reply(msg.content.data);
  }

  /** The notebook's cells as they are now (the kernel keeps the last list it was sent). */
  cells(ids: string[]): void {
    if (!this.closed) {
      this.comm.send({ cells: ids });
    }
  }

  ask(asked: IAsked): void {
    if (this.closed) {
      return;
    }
    this.queued.push(asked);
    if (this.queued.length === 1) {
      queueMicrotask(() => this.flush());
    }
  }

  private flush(): void {
    const batch = this.queued.filter(a => this.latest(a.node) === a);
    this.queued = [];
    if (!batch.length || this.closed) {
      return;
    }
    const id = this.next++;
    this.sent.set(id, batch);
    this.comm.send({ id, ask: [...new Set(batch.map(a => a.run_id))] });
  }

  private reply(data: unknown): void {
    const { id, offers } = (data ?? {}) as { id?: unknown; offers?: Record<string, IUndoOffer> };
    const batch = typeof id === 'number' ? this.sent.get(id) : undefined;
    if (!batch || !offers || typeof offers !== 'object') {
      return;
    }
    this.sent.delete(id as number);
    for (const asked of batch) {
      const offer = offers[asked.run_id];
      if (this.latest(asked.node) === asked && asked.node.isConnected) {
        asked.from = this;
        asked.answer(offer && typeof offer === 'object' ? offer : null);
      }
    }
  }

  /** The kernel went away: nothing it said stands; every record it answered goes back to asking (index.ts). */
  close(): IAsked[] {
    this.closed = true;
    const waiting = [...this.sent.values()].flat();
    this.sent.clear();
    return waiting;
  }
}

/** The plugin's state: the asks of every record on the page, and a channel per kernel that opened one. */
export class UndoOffers {
  private readonly asks = new Map<Element, IAsked>();
  private readonly channels = new Map<IUndoKernel, UndoChannel>();
  private readonly registered = new WeakSet<object>();

  constructor(private readonly panels: () => Iterable<IPanelLike>) {}

  /** A record's ask (the DOM event's detail); answered now if its kernel has a channel, else once one opens. */
  ask(node: Element, ask: IUndoAsk): void {
    const asked: IAsked = { node, run_id: ask.run_id, answer: ask.answer };
    this.asks.set(node, asked);
    for (const [node2] of this.asks) {
      if (!node2.isConnected && node2 !== node) {
        this.asks.delete(node2); // a record gone from the page
      }
    }
    const kernel = this.kernelOf(node);
    const channel = kernel ? this.channels.get(kernel) : undefined;
    if (channel && !channel.closed) {
      channel.ask(asked);
    }
  }

  /** Listen on this panel's kernel (and the next one after a change of kernel). */
  watch(panel: IPanelLike): void {
    const ctx = panel.sessionContext;
    if (!ctx || this.registered.has(panel as object)) {
      return;
    }
    this.registered.add(panel as object);
    this.register(ctx.session?.kernel);
    ctx.kernelChanged?.connect((_, change) => this.register(change.newValue));
    this.follow(panel);
  }

  private readonly followed = new WeakSet<object>();

  /** Send the kernel the notebook's cells whenever they change (once its model is there: a panel's model may come
   * after the panel). */
  private follow(panel: IPanelLike): void {
    const cells = cellsOf(panel);
    if (!cells || this.followed.has(cells as object)) {
      return;
    }
    this.followed.add(cells as object);
    cells.changed?.connect(() => this.sendCells(panel.sessionContext?.session?.kernel));
  }

  /** Tell the kernel which cells its notebooks hold now (after any insert, move or delete). */
  sendCells(kernel: IUndoKernel | null | undefined): void {
    const channel = kernel ? this.channels.get(kernel) : undefined;
    if (!channel || channel.closed) {
      return;
    }
    const ids: string[] = [];
    for (const panel of this.panels()) {
      if (panel.sessionContext?.session?.kernel === kernel) {
        const cells = cellsOf(panel);
        for (let i = 0; cells && i < cells.length; i++) {
          const id = cells.get(i)?.id;
          if (typeof id === 'string') {
            ids.push(id);
          }
        }
      }
    }
    channel.cells(ids);
  }

  register(kernel: IUndoKernel | null | undefined): void {
    if (!kernel || this.registered.has(kernel as object)) {
      return;
    }
    this.registered.add(kernel as object);
    kernel.registerCommTarget(UNDO_TARGET, comm => this.opened(kernel, comm));
    kernel.statusChanged?.connect((_, status) => {
      if (status === 'restarting' || status === 'dead' || status === 'autorestarting') {
        this.gone(kernel);
      }
    });
  }

  /** `%load_ext nbagent` ran in this kernel: ask for every record of its notebooks. */
  opened(kernel: IUndoKernel, comm: IComm): void {
    this.gone(kernel);
    const channel = new UndoChannel(comm, node => this.asks.get(node));
    comm.onClose = () => {
      if (this.channels.get(kernel) === channel) {
        this.gone(kernel);
      }
    };
    this.channels.set(kernel, channel);
    for (const panel of this.panels()) {
      this.follow(panel);
    }
    this.sendCells(kernel);
    for (const asked of this.asks.values()) {
      if (asked.node.isConnected && this.kernelOf(asked.node) === kernel) {
        channel.ask(asked);
      }
    }
  }

  private gone(kernel: IUndoKernel): void {
    const channel = this.channels.get(kernel);
    if (!channel) {
      return;
    }
    this.channels.delete(kernel);
    channel.close();
    for (const asked of this.asks.values()) {
      if (asked.from === channel) {
        asked.from = undefined;
        asked.answer(null);
      }
    }
  }

  private kernelOf(node: Element): IUndoKernel | null {
    for (const panel of this.panels()) {
      if (panel.node?.contains(node)) {
        return panel.sessionContext?.session?.kernel ?? null;
      }
    }
    return null;
  }
}

function cellsOf(panel: IPanelLike): ICellListLike | undefined {
  const model = (panel.content as { model?: { cells?: ICellListLike } } | undefined)?.model;
  return model?.cells && typeof model.cells.get === 'function' ? model.cells : undefined;
}

function notebookPanels(app: IApp): IPanelLike[] {
  return [...app.shell.widgets('main')]
    .map(w => w as IPanelLike)
    .filter(p => p.sessionContext && p.content && 'model' in (p.content as object));
}

const plugin = {
  id: 'nbagent-labextension:undo',
  description: 'Offers Undo… on a saved nbagent record only where the notebook\'s kernel says undo can act.',
  autoStart: true,
  activate: (app: IApp): void => {
    const offers = new UndoOffers(() => notebookPanels(app));
    onNotebooks(app, () => notebookPanels(app).forEach(p => offers.watch(p)));
    document.addEventListener(UNDO_ASK_EVENT, event => {
      const detail = (event as CustomEvent<IUndoAsk>).detail;
      if (detail && typeof detail.run_id === 'string' && typeof detail.answer === 'function'
          && event.target instanceof Element) {
        offers.ask(event.target, detail);
      }
    });
  }
};

export default plugin;
