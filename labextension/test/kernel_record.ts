/**
 * A run's record as the kernel draws it: nbagent/ui/record_html.py's `render_html` of a view, run in Python (the
 * interpreter of NBAGENT_PYTHON, which tests/test_labextension.py sets, else the project's .venv). The lab extension
 * shows that HTML; these tests give its renderer the very bundle a kernel would save.
 */

import { execFileSync } from 'child_process';
import { existsSync } from 'fs';
import { join } from 'path';

const ROOT = join(__dirname, '..', '..');
const VENV = join(ROOT, '.venv', 'bin', 'python');
const PYTHON = process.env.NBAGENT_PYTHON || (existsSync(VENV) ? VENV : 'python3');
const SCRIPT = 'import json, sys\nfrom nbagent.ui.record_html import render_html\n'
  + 'sys.stdout.write(json.dumps([render_html(v) for v in json.load(sys.stdin)]))';
const made = new Map<string, string>();

/** The text/html of each view's record (one Python process for all of them). */
export function recordHtmls(views: unknown[]): string[] {
  const todo = views.map(v => JSON.stringify(v)).filter(k => !made.has(k));
  if (todo.length) {
    const out = execFileSync(PYTHON, ['-c', SCRIPT], { cwd: ROOT, input: `[${todo.join(',')}]`, encoding: 'utf8' });
    (JSON.parse(out) as string[]).forEach((html, k) => made.set(todo[k], html));
  }
  return views.map(v => made.get(JSON.stringify(v))!);
}

/** The text/html of one view's record. */
export const recordHtml = (view: unknown): string => recordHtmls([view])[0];

/** The MIME bundle a kernel saves for a run: its JSON and its record's text/html. */
export const recordBundle = (mime: string, view: unknown): Record<string, unknown> =>
  ({ [mime]: view, 'text/html': recordHtml(view) });
