/**
 * nbagent-labextension: renders `application/vnd.nbagent.run+json`, the record an `%%agent` cell leaves in the
 * notebook, in JupyterLab with no kernel. The record is drawn once, by the kernel: the bundle's text/html
 * (nbagent/ui/record_html.py), the very HTML nbconvert shows, goes in through DOMPurify with the record's allow-list
 * (run_view/saved.js); this renderer attaches what needs the page: Undo…, Reproduce, the focus, open disclosures.
 */

import { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import { Widget } from '@lumino/widgets';

import { followFocus } from './focus';
import { showReproduce } from './reproduce';
import type { IUndoOffer } from './undo';
import { IRunView, renderRecord, UNDO_ASK_EVENT, UNDO_EVENT } from './view';

export const MIME_TYPE = 'application/vnd.nbagent.run+json';

/** The CSS class of a rendered record (only this renderer sets it). */
export const RECORD_CLASS = 'jp-nbagent-RunRecord';

export class RunRecordRenderer extends Widget implements IRenderMime.IRenderer {
  private readonly mimeType: string;
  private readonly open = new Map<number | string, boolean>();
  private view: IRunView | null = null; // the record drawn, whose Undo… the kernel is asked about once attached

  constructor(options: IRenderMime.IRendererOptions) {
    super();
    this.mimeType = options.mimeType;
    this.addClass(RECORD_CLASS);
  }

  renderModel(model: IRenderMime.IMimeModel): Promise<void> {
    const data = model.data[this.mimeType] as unknown;
    this.node.replaceChildren();
    try {
      if (!data || typeof data !== 'object' || Array.isArray(data)) {
        throw new Error('the record is not an object');
      }
      const html = model.data['text/html'];
      if (html === undefined || html === null) {
        showText(this.node, model.data['text/plain']);
        return Promise.resolve();
      }
      const root = renderRecord(this.node, html, { open: this.open });
      root.setAttribute('tabindex', '-1'); // focusable by the page (focus.ts), not a stop of Tab
      root.setAttribute('role', 'region');
      root.setAttribute('aria-label', `nbagent run ${String((data as IRunView).run_id ?? '')}`);
      this.view = data as IRunView;
      showReproduce(this.node, this.view); // (reproduce.ts)
      if (this.node.isConnected) {
        askUndo(this.node, this.view);
      }
      followFocus(root, String((data as IRunView).run_id ?? ''));
    } catch (err) {
      this.node.replaceChildren();
      const pre = document.createElement('pre');
      pre.className = 'jp-nbagent-RunRecord-error';
      pre.textContent = `nbagent: this run record could not be shown (${String(err)})`;
      this.node.appendChild(pre);
    }
    return Promise.resolve();
  }

  // the ask bubbles up to the page: only once the record is in it (JupyterLab renders before attaching)
  protected onAfterAttach(msg: any): void { // eslint-disable-line @typescript-eslint/no-explicit-any
    super.onAfterAttach(msg);
    if (this.view) {
      askUndo(this.node, this.view);
    }
  }
}

/** A record saved without its HTML (an output made by hand, or cut down): its text/plain, as text. */
function showText(node: HTMLElement, text: unknown): void {
  const pre = document.createElement('pre');
  pre.className = 'jp-nbagent-RunRecord-text';
  pre.textContent = Array.isArray(text) ? text.join('') : String(text ?? 'nbagent: this run record has no text/html');
  node.appendChild(pre);
}

/**
 * A finished run's record offers Undo… only where undo can act, which the record alone cannot tell (any run id can
 * be in a saved notebook): it asks the notebook's kernel, through the undo plugin (undo.ts), which reads this
 * notebook's log. Until a kernel running nbagent answers (a notebook just reopened, its new kernel without nbagent
 * loaded yet), a record whose run changed files keeps its Undo… as a question: a click loads nbagent in the
 * kernel and runs `%agent undo RUN` below, whose output says what undo can do, or why nothing (not in this log).
 */
export function askUndo(node: HTMLElement, view: IRunView): void {
  clearOffer(node);
  const status = String(view.status ?? 'running');
  if (!view.run_id || status === 'running' || status === 'waiting') {
    return;
  }
  const runId = String(view.run_id);
  let answered = false;
  node.dispatchEvent(new CustomEvent(UNDO_ASK_EVENT, {
    bubbles: true, detail: {
      run_id: runId, answer: (offer: IUndoOffer | null) => {
        answered = true;
        showOffer(node, runId, offer);
      }
    }
  }));
  if (!answered) {
    showOffer(node, runId, null); // no kernel has said yet: the question form (a later answer replaces it)
  }
}

const OFFER_PARTS = '.nbr-undo-offer, .nbr-undo-status, .nbr-undo-why, .nbr-undo-added';

function clearOffer(node: HTMLElement): void {
  node.querySelectorAll(OFFER_PARTS).forEach(el => el.remove());
}

function el(tag: string, cls: string, text?: string): HTMLElement {
  const e = document.createElement(tag);
  e.className = cls;
  if (text !== undefined) {
    e.textContent = text;
  }
  return e;
}

/**
 * The kernel's word on undoing this run: Undo… on the record's "↶ Undo" line (made from the kernel's words when the
 * record has none: a run that changed only cells), or why not beside that line. A click always says what came of
 * it: where the Undo panel is, or why there is none.
 */
export function showOffer(node: HTMLElement, runId: string, given: IUndoOffer | null): void {
  clearOffer(node);
  const root = node.querySelector('.nbagent-run');
  if (!root || root.getAttribute('data-run-id') !== runId) {
    return;
  }
  let hint = root.querySelector(':scope > .nbr-undo');
  if (!given && !hint) {
    return; // no kernel has said, and the record names no change to undo
  }
  const offer: IUndoOffer = given ?? {
    undo: true, title: `insert and run %agent undo ${runId} below (nbagent is loaded in the kernel first): it checks `
      + "this notebook's log, shows what will change and asks first"
  };
  if (!offer.undo) {
    if (hint && offer.why) {
      hint.appendChild(el('span', 'nbr-undo-why nbr-muted', ` — not undoable here: ${offer.why}`));
    }
    return;
  }
  if (!hint) {
    const [command, rest] = String(offer.line || `%agent undo ${runId} undoes this run's changes`).split(' undoes ');
    hint = el('p', 'nbr-undo nbr-undo-added');
    hint.append(el('strong', '', '↶ Undo'), ' ', el('code', '', command), ` undoes ${rest ?? ''}`);
    // where the kernel puts it: above the totals, or below a folded record's summary
    root.insertBefore(hint, root.querySelector(':scope > .nbr-foot'));
  }
  const button = el('button', 'nbr-btn nbr-undo-offer', 'Undo…') as HTMLButtonElement;
  button.type = 'button';
  button.title = offer.title || `insert and run %agent undo ${runId} below: it shows what will change and asks first`;
  const said = el('span', 'nbr-undo-status');
  said.setAttribute('role', 'status');
  button.addEventListener('click', () => {
    button.disabled = true;
    let answered = false;
    const done = (text: string, ok: boolean): void => {
      answered = true;
      said.textContent = ` ${text}`;
      said.classList.toggle('nbr-bad', !ok);
      button.disabled = ok; // (one cell per click: a second one would undo nothing)
    };
    node.dispatchEvent(new CustomEvent(UNDO_EVENT, { bubbles: true, detail: { run_id: runId, done } }));
    if (!answered) {
      done(`nothing on this page can run it: run %agent undo ${runId} in a cell of the notebook`, false);
    }
  });
  hint.append(' ', button, said);
}

export const rendererFactory: IRenderMime.IRendererFactory = {
  safe: true, // the record's HTML through DOMPurify with its own allow-list: fine in an untrusted notebook
  mimeTypes: [MIME_TYPE],
  defaultRank: 0,
  createRenderer: options => new RunRecordRenderer(options)
};

const extension: IRenderMime.IExtension = {
  id: 'nbagent-labextension:run-record',
  rendererFactory,
  rank: 0, // ahead of the text/html record in the same bundle
  dataType: 'json'
};

export default extension;
