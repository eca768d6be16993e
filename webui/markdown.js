// Markdown to DOM nodes for model output. Nothing is ever parsed as HTML: every piece of
// text becomes a text node, so a model that writes <script> or <img onerror> shows those
// characters. Covers what chat answers use: fenced code, inline code, headings, lists,
// quotes, rules, bold, italics and links (http, https and mailto only).

const SAFE_LINK = /^(https?:|mailto:)/i;

function element(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

// Inline spans: `code`, **bold**, *italic* / _italic_, [text](url). Unclosed markers stay text.
function appendInline(parent, text) {
  const pattern = /(`+)([^`]|[^`][\s\S]*?[^`])\1(?!`)|\*\*([^*]+)\*\*|\*([^*\s][^*]*)\*|_([^_\s][^_]*)_|\[([^\]]+)\]\(([^)\s]+)\)/g;
  let last = 0;
  for (const match of text.matchAll(pattern)) {
    if (match.index > last) parent.append(text.slice(last, match.index));
    if (match[1]) parent.append(element('code', '', match[2]));
    else if (match[3] !== undefined) appendInline(parent.appendChild(element('strong')), match[3]);
    else if (match[4] !== undefined) appendInline(parent.appendChild(element('em')), match[4]);
    else if (match[5] !== undefined) appendInline(parent.appendChild(element('em')), match[5]);
    else if (SAFE_LINK.test(match[7])) {
      const link = element('a', '', match[6]);
      link.href = match[7];
      link.rel = 'noopener noreferrer';
      link.target = '_blank';
      parent.append(link);
    } else parent.append(match[0]);
    last = match.index + match[0].length;
  }
  if (last < text.length) parent.append(text.slice(last));
}

function codeBlock(language, code) {
  const wrapper = element('div', 'code-block');
  const bar = element('div', 'code-bar');
  bar.append(element('span', 'code-language', language || 'text'));
  const copy = element('button', 'copy-code', 'Copy');
  copy.type = 'button';
  copy.addEventListener('click', () => navigator.clipboard?.writeText(code));
  bar.append(copy);
  const pre = element('pre');
  pre.append(element('code', '', code));
  wrapper.append(bar, pre);
  return wrapper;
}

// Renders `source` into `container` (emptied first).
export function renderMarkdown(container, source) {
  container.replaceChildren();
  const lines = source.replace(/\r\n?/g, '\n').split('\n');
  let paragraph = [];
  let list = null;
  const flush = () => {
    if (paragraph.length) {
      const p = element('p');
      paragraph.forEach((line, i) => {
        if (i) p.append(element('br'));
        appendInline(p, line);
      });
      container.append(p);
      paragraph = [];
    }
    list = null;
  };
  for (let i = 0; i < lines.length; ++i) {
    const line = lines[i];
    const fence = line.match(/^\s*(```|~~~)\s*([\w+-]*)\s*$/);
    if (fence) {
      flush();
      const body = [];
      for (++i; i < lines.length && !lines[i].trim().startsWith(fence[1]); ++i) body.push(lines[i]);
      container.append(codeBlock(fence[2], body.join('\n')));  // an unclosed fence runs to the end (streaming)
      continue;
    }
    const heading = line.match(/^(#{1,6})\s+(.*)$/);
    const item = line.match(/^\s*([-*+]|\d+[.)])\s+(.*)$/);
    if (heading) {
      flush();
      appendInline(container.appendChild(element(`h${Math.min(6, heading[1].length + 2)}`)), heading[2]);
    } else if (/^\s*([-*_])(\s*\1){2,}\s*$/.test(line)) {
      flush();
      container.append(element('hr'));
    } else if (item) {
      const ordered = /\d/.test(item[1]);
      if (paragraph.length) flush();
      if (!list || (list.tagName === 'OL') !== ordered) {
        list = element(ordered ? 'ol' : 'ul');
        container.append(list);
      }
      appendInline(list.appendChild(element('li')), item[2]);
    } else if (line.startsWith('>')) {
      flush();
      appendInline(container.appendChild(element('blockquote')), line.replace(/^>\s?/, ''));
    } else if (line.trim() === '') {
      flush();
    } else {
      if (list) list = null;
      paragraph.push(line);
    }
  }
  flush();
}
