// jsdom has no DragEvent, which @lumino/dragdrop (imported by @lumino/widgets) needs when it loads.
// (Not in the node environment of test/bundle.test.ts, which has no DOM at all.)
if (typeof (globalThis as any).DragEvent === 'undefined' && typeof (globalThis as any).MouseEvent !== 'undefined') {
  (globalThis as any).DragEvent = class DragEvent extends (globalThis as any).MouseEvent {};
}
