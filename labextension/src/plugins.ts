/**
 * The lab extension's JupyterLab plugins (package.json's `jupyterlab.extension`): those of cells.ts (cells, records,
 * undo) and reproduce.ts. The record's renderer is the MIME extension, index.ts.
 */

import cells from './cells';
import reproduce from './reproduce';

export default [...cells, reproduce];
