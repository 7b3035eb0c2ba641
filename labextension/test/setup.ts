// jsdom has no DragEvent, which @lumino/dragdrop (imported by @lumino/widgets) needs when it loads.
if (typeof (globalThis as any).DragEvent === 'undefined') {
  (globalThis as any).DragEvent = class DragEvent extends MouseEvent {};
}
