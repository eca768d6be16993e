// The chat page of `ernie serve` (docs/webui.md): conversations kept in this browser's
// local storage, answers streamed from /v1/chat/completions, the model's reasoning apart
// from its answer, tool calls as blocks, and the server's figures from /metrics. Plain
// modules, no build step: the files in webui/ are what the server sends.
import { renderMarkdown } from './markdown.js';

const STORE = 'ernie.webui.conversations';
const KEY_STORE = 'ernie.webui.api-key';
const $ = (id) => document.getElementById(id);

const state = {
  conversations: [],
  current: null,      // the open conversation
  model: 'default',
  capabilities: {},
  controller: null,   // AbortController of the answer being streamed
  attachments: [],    // {kind: 'image'|'video', url: data URL, name}
};

// ---------------------------------------------------------------- storage

function load() {
  try {
    const saved = JSON.parse(localStorage.getItem(STORE) ?? '[]');
    state.conversations = Array.isArray(saved) ? saved : [];
  } catch {
    state.conversations = [];
  }
}

function save() {
  try {
    localStorage.setItem(STORE, JSON.stringify(state.conversations));
  } catch {
    // Storage full (large attachments): the conversation lives on in this tab.
  }
}

function newConversation() {
  const conversation = { id: `${Date.now()}-${Math.random().toString(36).slice(2, 8)}`, title: 'New chat', messages: [] };
  state.conversations.unshift(conversation);
  return conversation;
}

// ---------------------------------------------------------------- server

function headers() {
  const key = localStorage.getItem(KEY_STORE);
  return { 'Content-Type': 'application/json', ...(key ? { Authorization: `Bearer ${key}` } : {}) };
}

// Asks for the API key (the server answered 401); resolves once one is given.
function askForKey() {
  const dialog = $('key-dialog');
  return new Promise((resolve) => {
    dialog.addEventListener('close', () => {
      const key = $('key-input').value.trim();
      if (key) localStorage.setItem(KEY_STORE, key);
      resolve(Boolean(key));
    }, { once: true });
    dialog.showModal();
  });
}

async function api(path, init = {}) {
  for (;;) {
    const response = await fetch(path, { ...init, headers: headers() });
    if (response.status !== 401 || !(await askForKey())) return response;
  }
}

async function loadModel() {
  const response = await api('/v1/models');
  if (!response.ok) return;
  const model = (await response.json()).data?.[0];
  if (!model) return;
  state.model = model.id;
  state.capabilities = model.capabilities ?? {};
  if (model.max_model_len) $('max-tokens').max = String(model.max_model_len - 1);
  $('model-name').textContent = model.id;
  document.title = `${model.id} - ernie.cpp`;
  $('attach').hidden = !state.capabilities.vision;
}

// The status strip: Prometheus text from /metrics every 2 s while the page is visible.
let lastTokens = null;
async function pollMetrics() {
  if (document.visibilityState !== 'visible') return;
  let text;
  try {
    const response = await fetch('/metrics');
    if (!response.ok) return;
    text = await response.text();
  } catch {
    return;
  }
  const values = {};
  for (const line of text.split('\n')) {
    const match = line.match(/^fastdeploy:(\w+)(?:\{[^}]*\})? ([-+\d.eE]+|NaN)$/);
    if (match) values[match[1]] = Number(match[2]);
  }
  const now = performance.now();
  const tokens = values.generation_tokens_total;
  let speed = '-';
  if (lastTokens && tokens >= lastTokens.tokens) speed = ((tokens - lastTokens.tokens) / ((now - lastTokens.at) / 1000)).toFixed(1);
  lastTokens = { tokens, at: now };
  const show = (name, value) => { document.querySelector(`[data-figure="${name}"] b`).textContent = value; };
  show('running', values.num_requests_running ?? '-');
  show('waiting', values.num_requests_waiting ?? '-');
  show('speed', speed);
  show('kv', values.gpu_cache_usage_perc === undefined ? '-' : `${(100 * values.gpu_cache_usage_perc).toFixed(1)}%`);
  show('prefix', values.hit_token_rate === undefined ? '-' : `${(100 * values.hit_token_rate).toFixed(0)}%`);
}

// ---------------------------------------------------------------- rendering

function button(label, title, onClick) {
  const node = document.createElement('button');
  node.type = 'button';
  node.textContent = label;
  node.title = title;
  node.setAttribute('aria-label', title);
  node.addEventListener('click', onClick);
  return node;
}

function renderConversations() {
  const list = $('conversations');
  list.replaceChildren();
  for (const conversation of state.conversations) {
    const item = document.createElement('li');
    const open = button(conversation.title, `Open "${conversation.title}"`, () => {
      if (state.controller) return;
      state.current = conversation;
      render();
      closeSidebarOnPhone();
    });
    open.className = 'conversation' + (conversation === state.current ? ' current' : '');
    if (conversation === state.current) open.setAttribute('aria-current', 'true');
    const remove = button('\u00d7', `Delete "${conversation.title}"`, () => {
      if (state.controller && conversation === state.current) return;
      state.conversations = state.conversations.filter((c) => c !== conversation);
      if (state.current === conversation) state.current = state.conversations[0] ?? newConversation();
      save();
      render();
    });
    remove.className = 'icon delete';
    item.append(open, remove);
    list.append(item);
  }
}

function toolCallBlock(call) {
  const block = document.createElement('div');
  block.className = 'tool-call';
  const name = document.createElement('div');
  name.className = 'tool-name';
  name.textContent = `\u{1F527} ${call.function?.name ?? '(unnamed tool)'}`;
  const args = document.createElement('pre');
  let text = call.function?.arguments ?? '';
  try {
    text = JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    // still streaming, or not JSON: shown as it is
  }
  args.textContent = text;
  block.append(name, args);
  return block;
}

function messageNode(message, index) {
  const node = document.createElement('article');
  node.className = `message ${message.role}`;
  node.setAttribute('aria-label', message.role === 'user' ? 'You' : 'Assistant');
  if (message.attachments?.length) {
    const strip = document.createElement('div');
    strip.className = 'attached';
    for (const attachment of message.attachments) {
      const media = document.createElement(attachment.kind === 'video' ? 'video' : 'img');
      media.src = attachment.url;
      if (attachment.kind === 'video') media.controls = true;
      else media.alt = attachment.name;
      strip.append(media);
    }
    node.append(strip);
  }
  if (message.reasoning) {
    const details = document.createElement('details');
    details.className = 'reasoning';
    details.open = Boolean(message.reasoningOpen);
    details.addEventListener('toggle', () => { message.reasoningOpen = details.open; });
    const summary = document.createElement('summary');
    summary.textContent = message.streaming && !message.content ? 'Thinking\u2026' : 'Reasoning';
    const body = document.createElement('div');
    body.className = 'reasoning-text';
    body.textContent = message.reasoning;
    details.append(summary, body);
    node.append(details);
  }
  const content = document.createElement('div');
  content.className = 'content';
  if (message.role === 'user') content.textContent = message.content;
  else renderMarkdown(content, message.content ?? '');
  node.append(content);
  for (const call of message.tool_calls ?? []) node.append(toolCallBlock(call));
  if (message.error) {
    const error = document.createElement('div');
    error.className = 'error';
    error.setAttribute('role', 'alert');
    error.textContent = message.error;
    node.append(error);
  }
  if (message.role === 'assistant' && !message.streaming) {
    const actions = document.createElement('div');
    actions.className = 'actions';
    actions.append(button('Copy', 'Copy the answer', () => navigator.clipboard?.writeText(message.content ?? '')));
    if (index === state.current.messages.length - 1) actions.append(button('Regenerate', 'Regenerate the answer', regenerate));
    if (message.finish) {
      const finish = document.createElement('span');
      finish.className = 'finish';
      finish.textContent = message.finish === 'stop' ? '' : `(${message.finish})`;
      actions.append(finish);
    }
    node.append(actions);
  }
  return node;
}

function renderMessages() {
  const box = $('messages');
  const atBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 40;
  box.replaceChildren(...state.current.messages.map(messageNode));
  if (atBottom) box.scrollTop = box.scrollHeight;
}

function render() {
  clearTimeout(pending);  // this render shows all of it
  pending = null;
  renderConversations();
  renderMessages();
  const busy = Boolean(state.controller);
  $('send').hidden = busy;
  $('stop').hidden = !busy;
}

// Streaming re-renders at most every 30 ms (a timer, not requestAnimationFrame, which
// stops in a background tab while the answer goes on arriving).
let pending = null;
function renderSoon() {
  pending ??= setTimeout(() => {
    pending = null;
    renderMessages();
  }, 30);
}

// ---------------------------------------------------------------- chatting

function requestMessages(messages) {
  return messages.filter((m) => !m.error || m.content).map((m) => {
    if (m.role === 'assistant') {
      const out = { role: 'assistant', content: m.content ?? '' };
      if (m.tool_calls?.length) out.tool_calls = m.tool_calls;
      return out;
    }
    if (!m.attachments?.length) return { role: m.role, content: m.content };
    const parts = m.attachments.map((a) => (a.kind === 'video'
      ? { type: 'video_url', video_url: { url: a.url } }
      : { type: 'image_url', image_url: { url: a.url } }));
    return { role: m.role, content: [...parts, { type: 'text', text: m.content }] };
  });
}

function settings() {
  const number = (id) => {
    const value = $(id).value.trim();
    return value === '' ? undefined : Number(value);
  };
  const body = {
    temperature: number('temperature'),
    top_p: number('top-p'),
    max_tokens: number('max-tokens'),
    chat_template_kwargs: { enable_thinking: $('thinking').checked },
  };
  const budget = number('reasoning-max-tokens');
  if (budget !== undefined) body.reasoning_max_tokens = budget;
  const tools = $('tools').value.trim();
  if (tools) body.tools = JSON.parse(tools);  // a mistake shows as this answer's error
  return body;
}

// Reads Server-Sent Events from `response` into `message`.
async function readStream(response, message) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      for (const line of event.split('\n')) {
        if (!line.startsWith('data: ')) continue;
        const data = line.slice(6);
        if (data === '[DONE]') return;
        const chunk = JSON.parse(data);
        if (chunk.error) throw new Error(chunk.error.message ?? 'the server reported an error');
        const choice = chunk.choices?.[0];
        if (!choice) continue;
        const delta = choice.delta ?? {};
        if (delta.reasoning_content) message.reasoning = (message.reasoning ?? '') + delta.reasoning_content;
        if (delta.content) message.content += delta.content;
        for (const call of delta.tool_calls ?? []) {
          message.tool_calls ??= [];
          const slot = (message.tool_calls[call.index ?? 0] ??= { id: '', type: 'function', function: { name: '', arguments: '' } });
          if (call.id) slot.id = call.id;
          if (call.function?.name) slot.function.name += call.function.name;
          if (call.function?.arguments) slot.function.arguments += call.function.arguments;
        }
        if (choice.finish_reason) message.finish = choice.finish_reason;
        renderSoon();
      }
    }
  }
}

async function answer() {
  const conversation = state.current;
  const message = { role: 'assistant', content: '', streaming: true };
  const history = requestMessages(conversation.messages);
  conversation.messages.push(message);
  state.controller = new AbortController();
  render();
  try {
    const response = await api('/v1/chat/completions', {
      method: 'POST',
      signal: state.controller.signal,
      body: JSON.stringify({ model: state.model, messages: history, stream: true, ...settings() }),
    });
    if (!response.ok) {
      let text = `HTTP ${response.status}`;
      try {
        text = (await response.json()).error?.message ?? text;
      } catch { /* not JSON */ }
      throw new Error(text);
    }
    await readStream(response, message);
  } catch (error) {
    if (error.name === 'AbortError') message.finish = 'stopped';
    else message.error = error.message;
  } finally {
    message.streaming = false;
    state.controller = null;
    save();
    render();
    $('prompt').focus();
  }
}

function send(text) {
  const conversation = state.current;
  if (conversation.messages.length === 0) conversation.title = text.slice(0, 40) || 'Attachment';
  conversation.messages.push({ role: 'user', content: text, attachments: state.attachments });
  state.attachments = [];
  renderAttachments();
  // The open conversation moves to the top of the list.
  state.conversations = [conversation, ...state.conversations.filter((c) => c !== conversation)];
  save();
  answer();
}

function regenerate() {
  if (state.controller) return;
  const messages = state.current.messages;
  if (messages.at(-1)?.role === 'assistant') messages.pop();
  answer();
}

// ---------------------------------------------------------------- attachments

function renderAttachments() {
  const list = $('attachments');
  list.replaceChildren();
  state.attachments.forEach((attachment, i) => {
    const item = document.createElement('li');
    item.append(attachment.name, button('\u00d7', `Remove ${attachment.name}`, () => {
      state.attachments.splice(i, 1);
      renderAttachments();
    }));
    list.append(item);
  });
}

function readAttachment(file) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve({ kind: file.type.startsWith('video/') ? 'video' : 'image', url: reader.result, name: file.name });
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(file);
  });
}

// ---------------------------------------------------------------- wiring

function closeSidebarOnPhone() {
  document.body.classList.remove('sidebar-open');
  $('toggle-sidebar').setAttribute('aria-expanded', 'false');
}

function wire() {
  $('composer').addEventListener('submit', (event) => {
    event.preventDefault();
    const text = $('prompt').value.trim();
    if (state.controller || (!text && !state.attachments.length)) return;
    $('prompt').value = '';
    send(text);
  });
  $('prompt').addEventListener('keydown', (event) => {
    if (event.key === 'Enter' && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      $('composer').requestSubmit();
    }
  });
  $('stop').addEventListener('click', () => state.controller?.abort());
  document.addEventListener('keydown', (event) => {
    if (event.key === 'Escape' && state.controller) state.controller.abort();
  });
  $('new-chat').addEventListener('click', () => {
    if (state.controller) return;
    state.current = state.current.messages.length ? newConversation() : state.current;
    render();
    closeSidebarOnPhone();
    $('prompt').focus();
  });
  $('toggle-settings').addEventListener('click', () => {
    const panel = $('settings');
    panel.hidden = !panel.hidden;
    $('toggle-settings').setAttribute('aria-expanded', String(!panel.hidden));
  });
  $('toggle-sidebar').addEventListener('click', () => {
    const open = document.body.classList.toggle('sidebar-open');
    $('toggle-sidebar').setAttribute('aria-expanded', String(open));
  });
  $('forget-key').addEventListener('click', () => localStorage.removeItem(KEY_STORE));
  $('key-form').addEventListener('submit', (event) => {
    event.preventDefault();  // closed here: the page submits no form anywhere
    $('key-dialog').close();
  });
  $('attach').addEventListener('click', () => $('file').click());
  $('file').addEventListener('change', async () => {
    for (const file of $('file').files) state.attachments.push(await readAttachment(file));
    $('file').value = '';
    renderAttachments();
  });
}

load();
state.current = state.conversations[0] ?? newConversation();
wire();
render();
loadModel();
pollMetrics();
setInterval(pollMetrics, 2000);
