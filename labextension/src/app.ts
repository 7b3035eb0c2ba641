/**
 * The few members of JupyterLab's application and signals the plugins use, duck-typed so the extension needs no
 * dependency on @jupyterlab/application or @jupyterlab/notebook (JupyterLab provides the objects at run time).
 */

export interface ISignal<T> {
  connect(fn: (sender: unknown, args: T) => void): boolean;
}

export interface IApp {
  commands?: { execute(id: string, args?: unknown): Promise<unknown> };
  shell: {
    widgets(area?: string): Iterable<unknown>;
    currentChanged?: ISignal<unknown>;
    layoutModified?: ISignal<unknown>;
  };
  restored?: Promise<unknown>;
}

/** Call `rescan` now, once the app is restored, and whenever a notebook may have opened (layout, current tab). */
export function onNotebooks(app: IApp, rescan: () => void): void {
  app.shell.layoutModified?.connect(rescan);
  app.shell.currentChanged?.connect(rescan);
  void app.restored?.then(rescan);
  rescan();
}
