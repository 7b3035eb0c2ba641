import { describe, expect, it } from 'vitest';

// @ts-expect-error: a plain .js module (the source of nbagent/ui/run_view.js)
import { linkAllowed, markdown } from '../src/run_view/markdown.js';
// @ts-expect-error: the committed bundle, as the widget and the lab extension load it
import live from '../../nbagent/ui/run_view.js';

const md = (source: string): HTMLElement => markdown(source, document.createElement('div'));

describe("the answer's Markdown", () => {
  it('renders lists, code, tables, links and emphasis', () => {
    const el = md('# Title\n\n1. one\n2. two\n\n- a\n- b\n\n`x = 1` and **bold** *em* ~~gone~~\n\n' +
      '```python\nprint("hi")\n```\n\n| a | b |\n|:--|--:|\n| 1 | 2 |\n\n[docs](https://example.com/x) ' +
      '<mailto:me@example.com>\n\n> quoted');
    expect(el.querySelector('h3')!.textContent).toBe('Title'); // headings start at h3, under the record's own
    expect([...el.querySelectorAll('ol li')].map(li => li.textContent)).toEqual(['one', 'two']);
    expect([...el.querySelectorAll('ul li')].map(li => li.textContent)).toEqual(['a', 'b']);
    expect(el.querySelector('p code')!.textContent).toBe('x = 1');
    expect(el.querySelector('strong')!.textContent).toBe('bold');
    expect(el.querySelector('em')!.textContent).toBe('em');
    expect(el.querySelector('s, del')!.textContent).toBe('gone');
    const pre = el.querySelector('pre code')!;
    expect(pre.className).toBe('language-python');
    expect(pre.textContent).toBe('print("hi")\n');
    expect([...el.querySelectorAll('th, td')].map(c => c.textContent)).toEqual(['a', 'b', '1', '2']);
    expect(el.querySelector('td')!.getAttribute('style')).toBe('text-align:left');
    const links = [...el.querySelectorAll('a')];
    expect(links.map(a => a.getAttribute('href'))).toEqual(['https://example.com/x', 'mailto:me@example.com']);
    expect(links.every(a => a.getAttribute('rel') === 'noopener noreferrer' && a.target === '_blank')).toBe(true);
    expect(el.querySelector('blockquote')!.textContent!.trim()).toBe('quoted');
  });

  it('lets no markup, handler or unsafe link through', () => {
    const el = md('<script>alert(1)</script>\n\n<img src=x onerror=alert(2)>\n\n<a href="javascript:alert(3)">x</a>\n\n' +
      '[click](javascript:alert(4)) [data](data:text/html,<b>x</b>) [rel](/files/secret) [vb](vbscript:x)\n\n' +
      '![pic](javascript:alert(5)) ![ok](https://example.com/p.png)\n\n' +
      '<iframe src="https://example.com"></iframe><style>*{}</style><svg onload=alert(6)>\n\n' +
      '```\n<script>alert(7)</script>\n```\n\n`<b onclick=x>`');
    expect(el.querySelectorAll('script, img, iframe, style, svg, b').length).toBe(0);
    expect(el.querySelectorAll('[onerror], [onload], [onclick]').length).toBe(0);
    // raw HTML stays text; refused links keep their text and lose their target
    expect(el.textContent).toContain('<script>alert(1)</script>');
    expect(el.textContent).toContain('<img src=x onerror=alert(2)>');
    expect(el.textContent).toContain('click');
    expect([...el.querySelectorAll('a')].map(a => a.getAttribute('href'))).toEqual(['https://example.com/p.png']);
    expect(el.querySelector('a')!.textContent).toBe('image: ok'); // no external assets: an image is a link
    expect(el.querySelector('pre code')!.textContent).toBe('<script>alert(7)</script>\n');
    for (const url of ['javascript:alert(1)', 'JaVaScRiPt:x', 'data:text/html,x', '/files/x', 'vbscript:x', '']) {
      expect(linkAllowed(url)).toBe(false);
    }
    for (const url of ['http://a.b', 'HTTPS://a.b', 'mailto:a@b.c']) expect(linkAllowed(url)).toBe(true);
  });

  it('is sanitised in the bundle the widget loads', () => {
    const host = document.createElement('div');
    document.body.appendChild(host);
    const view = { status: 'completed', answer: '<img src=x onerror=alert(1)> [x](javascript:alert(1)) **ok**' };
    live.render({ model: { get: (k: string) => ({ view } as any)[k], send: () => undefined, on: () => undefined,
      off: () => undefined }, el: host });
    const answer = host.querySelector('.nbv-answer .nbv-md')!;
    expect(answer.querySelector('strong')!.textContent).toBe('ok');
    expect(host.querySelectorAll('img, [onerror], a').length).toBe(0);
    expect(answer.textContent).toContain('<img src=x onerror=alert(1)>');
  });
});
