import { describe, expect, it } from 'vitest';

// @ts-expect-error: plain JS module of the run view
import { approveLabel, stepAction, stepEffect } from '../src/run_view/plans.js';

// The card's words for the agent's cells, as nbagent/ui/record_words.py words them (tests/test_run_cell_words.py
// pins the Python side to these same strings): the card's title and its Approve button must not disagree.
describe('the agent cell steps, worded as the record words them', () => {
  it('says what each step does', () => {
    expect(stepAction({ tool: 'run_cell' })).toBe('run a cell');
    expect(stepAction({ tool: 'replace_cell', target: 'nb1_0' })).toBe('replace cell nb1_0 and run it');
    expect(stepAction({ tool: 'insert_code_cell' })).toBe('insert a cell');
    expect(approveLabel({ steps: [{ tool: 'insert_code_cell', risk: 'WRITE_HIGH_RISK' }] })).toBe('Insert a cell');
  });
  it('says what a high-risk one does', () => {
    expect(stepEffect({ tool: 'run_cell' })).toBe('runs a new cell in the kernel, with everything the notebook can reach');
    expect(stepEffect({ tool: 'replace_cell', target: 'nb1_0' })).toContain('replaces the code of cell nb1_0');
  });
});
