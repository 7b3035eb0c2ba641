/**
 * The keyboard focus when a run ends. A person who decided with the keyboard has the focus in the run's live
 * view; when the run ends, its static record replaces that view (the focused element goes with it) and the focus
 * would fall to the page's body, so a next Tab lands on JupyterLab's "New Launcher". The live view marks its run
 * on <html> while it holds the focus (nbagent/ui/run_view.js, `data-nbagent-focus`, removed when the person moves
 * elsewhere); the record of that run takes the focus only if it then fell nowhere (the body, or the notebook or
 * cell around the record), never from another cell or control.
 */

export const FOCUS_ATTR = 'data-nbagent-focus';

const TRIES = 40; // the view's removal follows the record's rendering within a few frames; 40 x 50 ms is plenty
const EVERY_MS = 50;

/** Give `record` (the root of run `runId`'s record) the focus once the live view's focus has dropped. */
export function followFocus(record: HTMLElement, runId: string, tries = TRIES): void {
  const html = document.documentElement;
  if (!runId || html.getAttribute(FOCUS_ATTR) !== runId) {
    return;
  }
  const check = (left: number): void => {
    if (html.getAttribute(FOCUS_ATTR) !== runId) {
      return; // the person moved on, or another record took it
    }
    const active = document.activeElement;
    const dropped = !active || active === document.body || (record.isConnected && active.contains(record));
    if (record.isConnected && dropped) {
      record.setAttribute('tabindex', '-1');
      record.focus({ preventScroll: true });
      html.removeAttribute(FOCUS_ATTR);
      return;
    }
    if (left > 0) {
      setTimeout(() => check(left - 1), EVERY_MS);
    }
  };
  setTimeout(() => check(tries), 0);
}
