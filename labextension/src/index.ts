/**
 * nbagent-labextension: renders `application/vnd.nbagent.run+json`, the static record an `%%agent` cell leaves
 * in the notebook, richly in JupyterLab, with no kernel: the timeline, plans and decisions, diffs, the answer,
 * totals, the run id and the path of its log. All text from the model, tools or people goes in as text nodes.
 */

import { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import { Widget } from '@lumino/widgets';

import { followFocus } from './focus';
import { IRunView, renderView, UNDO_EVENT } from './view';

export const MIME_TYPE = 'application/vnd.nbagent.run+json';

/** The CSS class of a rendered record (only this renderer sets it). */
export const RECORD_CLASS = 'jp-nbagent-RunRecord';

export class RunRecordRenderer extends Widget implements IRenderMime.IRenderer {
  private readonly mimeType: string;
  private readonly open = new Map<string, boolean>();

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
      const root = renderView(this.node, data as IRunView, { open: this.open });
      root.setAttribute('tabindex', '-1'); // focusable by the page (focus.ts), not a stop of Tab
      root.setAttribute('role', 'region');
      root.setAttribute('aria-label', `nbagent run ${String((data as IRunView).run_id ?? '')}`);
      offerUndo(this.node, data as IRunView);
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
}

/**
 * A finished run that changed files: its record's "↶ Undo %agent undo RUN" line gets a button. A record has no
 * kernel of its own, so the button asks the notebook (an event the cells plugin handles) to insert that very line
 * in a new cell below and run it: the Undo panel there shows what will change and asks before anything does.
 */
function offerUndo(node: HTMLElement, view: IRunView): void {
  const hint = node.querySelector('.nbv-undo-hint');
  if (!hint || !view.run_id) {
    return;
  }
  const button = document.createElement('button');
  button.type = 'button';
  button.className = 'nbv-btn nbv-quiet nbv-undo-offer';
  button.textContent = 'Undo…';
  button.title = `insert and run %agent undo ${view.run_id} below: it shows what will change and asks first`;
  button.addEventListener('click', () => {
    node.dispatchEvent(new CustomEvent(UNDO_EVENT, { bubbles: true, detail: { run_id: view.run_id } }));
  });
  hint.appendChild(document.createTextNode(' '));
  hint.appendChild(button);
}

export const rendererFactory: IRenderMime.IRendererFactory = {
  safe: true, // text nodes only: fine in an untrusted notebook
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
