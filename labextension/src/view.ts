/**
 * What the lab extension shares with the live anywidget view: `nbagent/ui/run_view.js` (the one-file bundle that
 * `npm run build:view` makes of `src/run_view/`, committed) exports `renderRecord`, which shows a run's record (the
 * kernel's HTML) made safe for the page, and the words of a decision. Importing the bundle, not its sources, keeps
 * the lab extension on the very code the widget runs. The bundler
 * (rspack, through @jupyter/builder) and vitest resolve this relative import; TypeScript gets the types declared here.
 */

// @ts-expect-error: a plain .js module outside this package; its API is typed below
import * as shared from '../../nbagent/ui/run_view.js';

/** One step of the timeline (see nbagent/ui/viewstate.py). */
export interface IRunStep {
  id?: string;
  kind?: string;
  title?: string;
  detail?: string;
  status?: string;
  tool?: string;
  arguments?: unknown;
  risk?: string;
  target?: string;
  result_preview?: string;
  duration_ms?: number;
  [key: string]: unknown;
}

/** The view-state dict carried by `application/vnd.nbagent.run+json` (version 1). */
export interface IRunView {
  version?: number;
  run_id?: string;
  status?: string;
  model?: string;
  prompt?: string;
  log_path?: string;
  superseded_by?: string | null;
  steps?: IRunStep[];
  plans?: Record<string, unknown>[];
  pending?: Record<string, unknown> | null;
  decisions?: Record<string, unknown>[];
  answer?: string | null;
  totals?: Record<string, unknown>;
  [key: string]: unknown;
}

export interface IRenderOptions {
  /** <details> open states by their order in the record, kept across re-renders. */
  open?: Map<number | string, boolean>;
}

/**
 * Show a run's record (its text/html, nbagent/ui/record_html.py: a string or nbformat's list of lines) in `el`,
 * through DOMPurify with the record's allow-list; returns its root (`.nbagent-run`), or throws when there is none.
 */
export const renderRecord: (el: HTMLElement, html: unknown, options?: IRenderOptions) => HTMLElement =
  shared.renderRecord;

/** The record's HTML as safe DOM nodes (what `renderRecord` shows). */
export const recordFragment: (html: unknown) => DocumentFragment = shared.recordFragment;

/** One plan as the view carries it (see nbagent/ui/viewstate.py); its steps are PlanStep dicts. */
export interface IPlan {
  plan_id?: string;
  purpose?: string;
  max_risk?: string;
  steps?: Array<{ tool?: string; target?: string | null; risk?: string; risk_reason?: string | null; [key: string]: unknown }>;
  [key: string]: unknown;
}

/** The Approve button's text, phrased from the plan: "Delete data.txt", "Approve 3 steps (1 delete)". */
export const approveLabel: (plan: IPlan) => string = shared.approveLabel;

/** What a plan does, in nbagent's words (never the model's): "delete data.txt", "2 steps: create a.md, run code". */
export const planSummary: (plan: IPlan) => string = shared.planSummary;

/** The approval question, from the plan: "Delete data.txt?", "Run these 3 actions?" */
export const approvalQuestion: (plan: IPlan) => string = shared.approvalQuestion;

/** The confirm button of a denial: "Deny: delete data.txt", "Deny these 3 actions". */
export const denyLabel: (plan: IPlan) => string = shared.denyLabel;

/** The DOM event a record's Undo button sends (index.ts); the cells plugin (cells.ts) answers it in the notebook. */
export const UNDO_EVENT = 'nbagent-undo';

/** The DOM event a record sends to learn whether to offer Undo… (index.ts); the undo plugin (undo.ts) asks the
 * notebook's kernel and calls `detail.answer` back. */
export const UNDO_ASK_EVENT = 'nbagent-undo-ask';
