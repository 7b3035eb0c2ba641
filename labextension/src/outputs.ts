/**
 * The outputs of code an agent runs as a notebook cell (`run_cell`, `replace_cell`), routed into that cell.
 *
 * The kernel runs the agent's code under a parent message id M of its own (nbagent/ipython/run_cell.py) and tells
 * the front end, on the comm `nbagent.cells`, which cell M belongs to. No execute request of this page has id M,
 * so JupyterLab's kernel connection has no future for it and shows its IOPub messages nowhere (it only emits them
 * on `iopubMessage`); this router puts each of them into the cell's output model, as JupyterLab's OutputArea does
 * for a person's cell (`OutputArea._onIOPub`): stream, display_data, execute_result and error are added (the output
 * model merges consecutive streams and applies `\r`), clear_output clears (with `wait`, at the next output),
 * update_display_data replaces the outputs shown under its display id, and a display_data whose display id is
 * already shown updates those outputs too (the kernel connection's `_handleDisplayId`).
 *
 * The cell shows as running (`[*]`) until its code ended: the kernel says so (`done`, cells.ts), the run's live view
 * shows the tool call's step ended, the run's next cell starts, or the agent's request goes idle.
 *
 * Like a person's cell (whose future JupyterLab keeps until the cell runs again), a route outlives the code's end:
 * output a thread of the agent's code prints later still lands in the cell. Routes end when the cell is gone,
 * runs again (a person's run, a replace), is restored by an undo, or when more than `limit` newer routes exist.
 *
 * The cell models are used through the few members needed (duck-typed): JupyterLab provides them at run time.
 */

export interface IOutputJSON {
  output_type: string;
  [key: string]: unknown;
}

export interface IOutputsLike {
  readonly length: number;
  add(output: IOutputJSON): number;
  set(index: number, output: IOutputJSON): void;
  clear(wait?: boolean): void;
}

export interface ICodeCellLike {
  readonly id: string;
  readonly type?: string;
  readonly outputs?: IOutputsLike;
  executionCount: number | null;
  executionState?: string;
  trusted?: boolean;
  readonly isDisposed?: boolean;
}

export interface IIOPubMessage {
  header: { msg_type: string; msg_id?: string };
  parent_header?: { msg_id?: string } | Record<string, never> | null;
  content: Record<string, unknown>;
}

/** The output types an IOPub message of these kinds becomes (OutputArea's: update_display_data shows as display_data). */
const ADDED = new Set(['stream', 'display_data', 'execute_result', 'error']);

/** The nbformat output an IOPub message adds to a cell, as JupyterLab's OutputArea makes it (none: not an output). */
export function outputOf(msg: IIOPubMessage): IOutputJSON | null {
  const kind = msg.header?.msg_type;
  if (!ADDED.has(kind) && kind !== 'update_display_data') {
    return null;
  }
  const { transient: _transient, ...content } = (msg.content ?? {}) as Record<string, unknown>;
  void _transient; // routing information, never part of a saved output
  return { ...content, output_type: kind === 'update_display_data' ? 'display_data' : kind };
}

function displayIdOf(msg: IIOPubMessage): string | null {
  const id = (msg.content?.transient as { display_id?: unknown } | undefined)?.display_id;
  return typeof id === 'string' && id ? id : null;
}

export function parentOf(msg: { parent_header?: unknown }): string | null {
  const id = (msg.parent_header as { msg_id?: unknown } | null | undefined)?.msg_id;
  return typeof id === 'string' && id ? id : null;
}

interface IRoute {
  msgId: string;
  cellId: string;
  /** The request the agent's run answers (the %%agent cell's execute request): its idle ends the code's run. */
  requestId: string | null;
  /** The tool call that ran the code: its step in the run's live view ending ends the code's run. */
  callId: string | null;
  /** The %%agent cell (the payload's after_cell_id). */
  agentCellId: string | null;
  running: boolean;
  /** display id -> indices of the cell's outputs shown under it (OutputArea's `_displayIdMap`) */
  displays: Map<string, number[]>;
  /** a clear_output with wait=true came: the next output clears the cell first (the output model does the same) */
  clearNext: boolean;
}

export class OutputRouter {
  private routes = new Map<string, IRoute>(); // msg id -> route, oldest first
  private inputs = new Map<string, number>(); // request msg id -> the execution count its execute_input announced
  private kept = new Map<string, Set<string>>(); // request msg id -> its %%agent cells, once its idle came
  private requests = new Map<string, string>(); // msg id of an execute request this page sent -> its cell's id

  /** `find`: the code cell with this id in the notebook now, or null (deleted). */
  constructor(private find: (cellId: string) => ICodeCellLike | null, private limit = 50) {}

  /** The msg ids routed now (oldest first). */
  get routed(): string[] {
    return [...this.routes.keys()];
  }

  /**
   * The kernel is about to run code under `msgId` in the cell `cellId` with this execution count: the cell's old
   * outputs go, it shows as running, and the messages of `msgId` go into it from now on. Earlier routes of the same
   * request stop running (the agent runs one tool at a time: their code ended). False when the cell is not there.
   */
  start(msgId: string, cellId: string, requestId: string | null, executionCount: number | null,
        callId: string | null = null, agentCellId: string | null = null): boolean {
    this.forgetCell(cellId);
    if (requestId) {
      for (const route of this.routes.values()) {
        if (route.requestId === requestId) {
          this.stop(route);
        }
      }
    }
    const cell = this.find(cellId);
    if (!cell || !cell.outputs) {
      return false;
    }
    cell.outputs.clear();
    cell.trusted = true; // as for a person's run: the code was approved and ran in their kernel
    cell.executionCount = typeof executionCount === 'number' ? executionCount : null;
    cell.executionState = 'running'; // after the count: setting a count makes JupyterLab's cell idle
    this.routes.set(msgId, { msgId, cellId, requestId, callId, agentCellId, running: true, displays: new Map(),
                             clearNext: false });
    while (this.routes.size > this.limit) {
      const oldest = this.routes.values().next().value as IRoute;
      this.stop(oldest);
      this.routes.delete(oldest.msgId);
    }
    return true;
  }

  /** The code of `msgId` ended: its cell shows its execution count again (the route stays, for late output). */
  finish(msgId: string): void {
    const route = this.routes.get(msgId);
    if (route) {
      this.stop(route);
    }
  }

  /**
   * This page asked the kernel to run the cell `cellId` (an execute request with this msg id): from now on the cell's
   * outputs are that run's (JupyterLab's own), and if the run is an agent's that runs cells, the count is kept.
   */
  /**
   * The kernel's execute_reply to request `msgId` (shell channel). JupyterLab sets the reply's count once both the
   * reply and the request's idle have come, and the two channels arrive in either order: so the %%agent cell's own
   * count is put back after whichever comes last (`keepCount`).
   */
  replied(msgId: string): void {
    const agentCells = this.kept.get(msgId);
    if (agentCells) {
      this.keepCount(msgId, agentCells);
      this.kept.delete(msgId);
    }
  }

  requested(msgId: string, cellId: string): void {
    this.forgetCell(cellId);
    this.requests.set(msgId, cellId);
    if (this.requests.size > this.limit) {
      this.requests.delete(this.requests.keys().next().value as string);
    }
  }

  /** No more messages go to this cell (deleted, run again, restored by an undo); its state is left as it is. */
  forgetCell(cellId: string): void {
    for (const route of [...this.routes.values()]) {
      if (route.cellId === cellId) {
        this.routes.delete(route.msgId);
      }
    }
  }

  /** The kernel restarted: nothing runs any more, and no message will come for these ids. */
  reset(): void {
    for (const route of this.routes.values()) {
      this.stop(route);
    }
    this.routes.clear();
  }

  /**
   * One IOPub message of the kernel; true when it went into (or, its cell being gone, was dropped for) a cell this
   * router keeps. Never throws for a cell the person deleted or changed meanwhile.
   */
  handle(msg: IIOPubMessage): boolean {
    const kind = msg.header?.msg_type;
    const parent = parentOf(msg);
    if (kind === 'execute_input' && parent && typeof msg.content?.execution_count === 'number') {
      this.inputs.set(parent, msg.content.execution_count);
      if (this.inputs.size > this.limit) {
        this.inputs.delete(this.inputs.keys().next().value as string);
      }
    }
    if (kind === 'status') {
      const state = msg.content?.execution_state;
      if (state === 'idle' && parent) {
        const agentCells = new Set<string>();
        for (const route of this.routes.values()) {
          if (route.requestId === parent) {
            this.stop(route);
            agentCells.add(this.requests.get(parent) ?? route.agentCellId ?? '');
          }
        }
        agentCells.delete('');
        this.keepCount(parent, agentCells);
      } else if (state === 'restarting' || state === 'starting' || state === 'dead') {
        this.reset();
      }
      return false;
    }
    if (kind === 'comm_msg') {
      this.viewChanged(msg);
      return false;
    }
    const displayId = displayIdOf(msg);
    if (kind === 'update_display_data') {
      if (displayId) {
        this.updateDisplays(displayId, msg);
      }
      return parent !== null && this.routes.has(parent);
    }
    const route = parent ? this.routes.get(parent) : undefined;
    if (!route) {
      return false;
    }
    const cell = this.cellOf(route);
    if (!cell) {
      return true; // the person deleted the cell: its messages are dropped
    }
    try {
      this.apply(route, cell, kind, msg, displayId);
    } catch (err) {
      console.warn('nbagent: an output of the agent\'s cell could not be shown', err);
    }
    return true;
  }

  private apply(route: IRoute, cell: ICodeCellLike, kind: string, msg: IIOPubMessage, displayId: string | null
  ): void {
    const outputs = cell.outputs!;
    if (kind === 'clear_output') {
      const wait = !!msg.content?.wait;
      outputs.clear(wait);
      if (wait) {
        route.clearNext = true;
      } else {
        route.displays.clear();
      }
      return;
    }
    const output = outputOf(msg);
    if (!output) {
      return; // execute_input, comm messages...: not outputs
    }
    if (kind === 'display_data' && displayId) {
      this.updateDisplays(displayId, msg); // shown before under this id: those outputs show the new data
    }
    if (route.clearNext) {
      route.clearNext = false;
      route.displays.clear(); // the model clears itself before this add
    }
    outputs.add(output);
    if (kind === 'display_data' && displayId) {
      const at = route.displays.get(displayId) ?? [];
      at.push(outputs.length - 1);
      route.displays.set(displayId, at);
    }
  }

  /** Every output of the routed cells shown under `displayId` takes the message's data. */
  private updateDisplays(displayId: string, msg: IIOPubMessage): void {
    const output = { ...outputOf(msg)!, output_type: 'display_data' };
    for (const route of this.routes.values()) {
      const at = route.displays.get(displayId);
      const cell = at ? this.cellOf(route) : null;
      if (!at || !cell) {
        continue;
      }
      for (const index of at) {
        if (index < cell.outputs!.length) {
          cell.outputs!.set(index, output);
        }
      }
    }
  }

  /**
   * The %%agent cell keeps the count its execute_input announced. ipykernel's execute_reply says
   * `shell.execution_count - 1` at the end, which the cells the agent ran have moved on: JupyterLab would show the
   * count of the agent's last cell on the %%agent cell too. It sets the reply's count once the request is done (a
   * few promise steps after this idle), so this runs after it.
   */
  private keepCount(requestId: string, agentCells: Set<string>): void {
    const count = this.inputs.get(requestId);
    if (count === undefined || !agentCells.size) {
      return;
    }
    this.kept.set(requestId, agentCells);
    if (this.kept.size > this.limit) {
      this.kept.delete(this.kept.keys().next().value as string);
    }
    setTimeout(() => {
      for (const id of agentCells) {
        const cell = this.find(id);
        if (cell && !cell.isDisposed && cell.executionCount !== count && cell.executionState !== 'running') {
          cell.executionCount = count;
        }
      }
    }, 0);
  }

  /**
   * A state update of a widget: when it is the run's live view (nbagent/ui/widget.py, its `view` trait, shaped by
   * viewstate.py) and the step of a running route's tool call is no longer running, that code ended.
   */
  private viewChanged(msg: IIOPubMessage): void {
    const running = [...this.routes.values()].filter(r => r.running && r.callId);
    const data = msg.content?.data as { state?: { view?: { steps?: unknown } } } | undefined;
    const steps = data?.state?.view?.steps;
    if (!running.length || !Array.isArray(steps)) {
      return;
    }
    const ended = new Set<string>();
    for (const step of steps as { call_id?: unknown; kind?: unknown; status?: unknown }[]) {
      if (step && step.kind === 'tool' && typeof step.call_id === 'string' && step.status !== 'running'
          && step.status !== 'waiting') {
        ended.add(step.call_id);
      }
    }
    running.filter(r => ended.has(r.callId!)).forEach(r => this.stop(r));
  }

  private cellOf(route: IRoute): ICodeCellLike | null {
    const cell = this.find(route.cellId);
    if (!cell || cell.isDisposed || !cell.outputs) {
      this.routes.delete(route.msgId);
      return null;
    }
    return cell;
  }

  private stop(route: IRoute): void {
    if (!route.running) {
      return;
    }
    route.running = false;
    const cell = this.find(route.cellId);
    if (cell && !cell.isDisposed && cell.executionState === 'running') {
      cell.executionState = 'idle'; // JupyterLab's prompt shows the execution count again
    }
  }
}
