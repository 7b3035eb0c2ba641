// @vitest-environment node
import { readFileSync } from 'fs';

import { describe, expect, it } from 'vitest';

// @ts-expect-error: a plain .mjs build script; its API is bundleText() and OUTFILE
import { bundleText, OUTFILE } from '../build-view.mjs';

describe('nbagent/ui/run_view.js', () => {
  // The committed bundle is what the Python package serves and the lab extension imports. If this fails, the
  // sources in src/run_view/ changed without a rebuild: `cd labextension && npm ci && npm run build:view`, commit.
  it('is what the build makes of src/run_view/', async () => {
    const built: string = await bundleText();
    expect(readFileSync(OUTFILE, 'utf8') === built).toBe(true);
  });
});
