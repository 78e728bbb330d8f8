"""The JavaScript the read_page tool runs in the page: a compact snapshot with element refs.

Kept as a Python string (not a .js file) so it ships with the package without package-data rules."""

OUTLINE_JS = r"""
// Compact page snapshot for the read_page tool: one line per heading, text block, control and table row.
// Controls get a ref: their HTML id when they have one (stable across visits), else a data-coevo-ref
// "eN" assigned in document order and kept on the element. Returns {title, scrollY, height, lines}.
() => {
  const lines = [];
  let maxRef = 0;
  document.querySelectorAll('[data-coevo-ref]').forEach(el => {
    const n = parseInt(el.getAttribute('data-coevo-ref').slice(1), 10);
    if (n > maxRef) maxRef = n;
  });
  const ref = el => {
    if (el.id) return el.id;
    let r = el.getAttribute('data-coevo-ref');
    if (!r) { r = 'e' + (++maxRef); el.setAttribute('data-coevo-ref', r); }
    return r;
  };
  const clean = s => (s || '').replace(/\s+/g, ' ').trim();
  const q = s => JSON.stringify(s);
  const isHidden = el => {
    if (el.hidden || el.getAttribute('aria-hidden') === 'true') return true;
    const cs = getComputedStyle(el);
    return cs.display === 'none' || cs.visibility === 'hidden';
  };
  const yOf = el => Math.round(el.getBoundingClientRect().top + window.scrollY);
  const labelOf = el => {
    const al = el.getAttribute('aria-label');
    if (al) return clean(al);
    if (el.labels && el.labels.length) return clean(Array.from(el.labels).map(l => l.innerText).join(' '));
    return clean(el.getAttribute('placeholder') || el.getAttribute('title') || el.getAttribute('name') || '');
  };
  // A control's one-line description, '' for a control that is not shown, null for a non-control.
  const control = (el, inCell) => {
    const tag = el.tagName, dis = el.disabled ? ' [disabled]' : '';
    if (tag === 'A' && el.hasAttribute('href'))
      return `link ${q(clean(el.innerText) || labelOf(el))} [ref=${ref(el)}]` + (inCell ? '' : ` -> ${el.getAttribute('href')}`);
    if (tag === 'BUTTON' || (tag === 'INPUT' && ['submit', 'button', 'reset'].includes(el.type)))
      return `button ${q(clean(el.innerText || el.value) || labelOf(el))} [ref=${ref(el)}]${dis}`;
    if (tag === 'INPUT') {
      if (el.type === 'hidden') return '';
      if (el.type === 'checkbox' || el.type === 'radio')
        return `${el.type} ${q(labelOf(el))} [ref=${ref(el)}]${el.checked ? ' [checked]' : ''}${dis}`;
      const v = el.type === 'password' ? '*'.repeat(el.value.length) : el.value;
      const kind = el.type && el.type !== 'text' ? ` (${el.type})` : '';
      return `textbox ${q(labelOf(el))} [ref=${ref(el)}]${kind} value=${q(v)}${dis}`;
    }
    if (tag === 'TEXTAREA') return `textbox ${q(labelOf(el))} [ref=${ref(el)}] (multi-line) value=${q(el.value)}${dis}`;
    if (tag === 'SELECT') {
      const opts = Array.from(el.options).map(o => (o.selected ? '*' : '') + clean(o.text));
      return `combobox ${q(labelOf(el))} [ref=${ref(el)}] options: ${opts.join(' | ')}${dis}`;
    }
    if (el.getAttribute('role') === 'button') return `button ${q(clean(el.innerText) || labelOf(el))} [ref=${ref(el)}]`;
    return null;
  };
  const SKIP = new Set(['SCRIPT', 'STYLE', 'NOSCRIPT', 'TEMPLATE', 'HEAD']);
  const INLINE = new Set(['SPAN', 'STRONG', 'EM', 'B', 'I', 'CODE', 'SMALL', 'ABBR', 'TIME', 'MARK', 'SUP', 'SUB']);
  // Text of a table cell with its controls inlined.
  const inlineText = node => {
    let out = '';
    for (const c of node.childNodes) {
      if (c.nodeType === 3) { out += ' ' + c.textContent; continue; }
      if (c.nodeType !== 1 || SKIP.has(c.tagName) || isHidden(c)) continue;
      const d = control(c, true);
      if (d === '') continue;
      if (d !== null) out += ' [' + d + ']';
      else if (c.tagName === 'LABEL' && c.control) continue;
      else out += ' ' + inlineText(c);
    }
    return clean(out);
  };
  const emit = (depth, y, text) => { if (text) lines.push({d: depth, y: y, t: text}); };
  const walk = (el, depth) => {
    let buf = '', bufY = yOf(el);
    const flush = () => { emit(depth, bufY, clean(buf)); buf = ''; };
    for (const c of el.childNodes) {
      if (c.nodeType === 3) { if (!clean(buf)) bufY = yOf(el); buf += ' ' + c.textContent; continue; }
      if (c.nodeType !== 1 || SKIP.has(c.tagName) || isHidden(c)) continue;
      const d = control(c, false);
      if (d === '') continue;
      if (d !== null) { flush(); emit(depth, yOf(c), d); continue; }
      const tag = c.tagName, role = c.getAttribute('role');
      if (tag === 'LABEL' && c.control && !c.contains(c.control)) continue;  // named on its control
      if (/^H[1-6]$/.test(tag)) { flush(); emit(depth, yOf(c), `heading ${q(clean(c.innerText))} [level=${tag[1]}]`); continue; }
      if (role === 'alert' || role === 'status') { flush(); emit(depth, yOf(c), `${role}: ${clean(c.innerText)}`); continue; }
      if (tag === 'TABLE') {
        flush();
        const cap = c.caption ? ' ' + q(clean(c.caption.innerText)) : '';
        const rows = Array.from(c.rows);
        emit(depth, yOf(c), `table${cap} (${Math.max(0, rows.length - (c.tHead ? 1 : 0))} rows):`);
        for (const r of rows) emit(depth + 1, yOf(r), '| ' + Array.from(r.cells).map(inlineText).join(' | ') + ' |');
        continue;
      }
      if (INLINE.has(tag)) { if (!clean(buf)) bufY = yOf(c); buf += ' ' + inlineText(c); continue; }
      flush();
      if (tag === 'NAV' || tag === 'FORM' || role === 'dialog') {
        const kind = tag === 'NAV' ? 'navigation' : tag === 'FORM' ? 'form' : 'dialog';
        const name = c.getAttribute('aria-label');
        emit(depth, yOf(c), `${kind}${name ? ' ' + q(name) : ''}:`);
        walk(c, depth + 1);
      } else {
        walk(c, depth);
      }
    }
    flush();
  };
  if (document.body) walk(document.body, 0);
  return {title: document.title, scrollY: Math.round(window.scrollY), height: document.documentElement.scrollHeight,
          viewport: window.innerHeight, lines: lines};
}
"""
