// OpenStarry Edge web UI: plain JavaScript, no framework, nothing loaded
// from elsewhere. Every call goes to this device's HTTP API; the pages are
// built with DOM calls, never parsed from strings of HTML.
'use strict';

// gen counts page changes: a request that answers after the page changed
// draws nothing.
const S = { auth: false, loginRequired: false, csrf: '', name: '', timer: 0, page: '', last: {}, gen: 0 };
const POLL_AGENTS_MS = 2000; // the agents' table: tick and last result live
const POLL_PAGE_MS = 4000;   // projects and approvals

// ---------- DOM helpers ----------

function el(tag, props, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (k in e && typeof v !== 'string') e[k] = v;
    else e.setAttribute(k, v === true ? '' : v);
  }
  for (const c of kids.flat()) {
    if (c === undefined || c === null || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}
const $ = (sel, root) => (root || document).querySelector(sel);
const main = () => $('#main');

// fill replaces node's children, skipping the empty ones (replaceChildren
// would show null as text).
function fill(node, ...kids) {
  node.replaceChildren(...kids.flat().filter((k) => k !== null && k !== undefined && k !== false));
  return node;
}

function announce(text) {
  const s = $('#status');
  s.textContent = '';
  setTimeout(() => { s.textContent = text; }, 30);
}

function banner(text) {
  const b = $('#banner');
  b.textContent = text || '';
  b.hidden = !text;
}

function fmtTime(v) {
  if (!v) return '—';
  const d = new Date(v);
  if (isNaN(d)) return String(v);
  const p = (n) => String(n).padStart(2, '0');
  return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}

function clip(s, n) {
  s = s == null ? '' : String(s);
  return s.length > n ? s.slice(0, n - 1) + '…' : s;
}

function pretty(raw) {
  if (raw === undefined || raw === null) return '';
  if (typeof raw === 'string') return raw;
  return JSON.stringify(raw, null, 2);
}

const TONE = {
  running: 'ok', done: 'ok', completed: 'ok', approved: 'ok', active: 'ok', verified: 'ok', online: 'ok',
  offline: 'bad', crashloop: 'bad', failed: 'bad', rejected: 'bad', interrupted: 'bad', unknown_outcome: 'bad', error: 'bad',
  stopped: 'warn', starting: 'warn', pending: 'warn', blocked: 'warn', revision_requested: 'warn',
  queued: 'warn', in_progress: 'warn', WAITING_FOR_APPROVAL: 'warn', untried: 'warn', resumed: '',
};
function badge(text) {
  return el('span', { class: 'badge ' + (TONE[text] || ''), text: String(text || '—').replace(/_/g, ' ') });
}

// A table that becomes a list of cards on a narrow screen: each cell
// carries its column's name.
function table(caption, cols, rows, rowFn) {
  const t = el('table', { class: 'cards' },
    caption ? el('caption', { class: 'visually-hidden', text: caption }) : null,
    el('thead', {}, el('tr', {}, cols.map((c) => el('th', { scope: 'col', text: c })))));
  const body = el('tbody');
  for (const r of rows) {
    const cells = rowFn(r);
    body.append(el('tr', {}, cells.map((c, i) => {
      const td = c instanceof HTMLTableCellElement ? c : el('td', {}, c);
      td.setAttribute('data-label', cols[i]);
      const v = el('div', { class: 'v' }); // one box beside the label on a phone
      v.append(...td.childNodes);
      td.append(v);
      return td;
    })));
  }
  t.append(body);
  return t;
}

function msgBox(id) {
  return el('div', { id, class: 'msg', role: 'alert' });
}
function showMsg(box, tone, text) {
  box.className = 'msg ' + tone;
  box.textContent = text;
}

// ---------- the API ----------

class ApiError extends Error {
  constructor(msg, code, status) { super(msg); this.code = code; this.status = status; }
}

async function api(method, path, body) {
  const opts = { method, headers: { Accept: 'application/json' }, credentials: 'same-origin', cache: 'no-store' };
  if (body !== undefined) {
    opts.headers['Content-Type'] = 'application/json';
    opts.body = JSON.stringify(body);
  }
  if (method !== 'GET' && S.csrf) opts.headers['X-CSRF-Token'] = S.csrf;
  let res;
  try {
    res = await fetch(path, opts);
  } catch (e) {
    throw new ApiError('the device did not answer (' + e.message + ')', 'network', 0);
  }
  const text = await res.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (_) { /* not JSON */ }
  if (!res.ok) {
    const msg = data && data.error ? data.error : `${res.status} ${res.statusText}: ${clip(text, 200)}`;
    const err = new ApiError(msg, (data && data.code) || 'http_' + res.status, res.status);
    if (res.status === 401 && !path.startsWith('/ui/')) {
      S.auth = false;
      showLogin(msg);
    }
    throw err;
  }
  return data;
}

// refusal turns an API error into the sentence shown to the operator.
function refusal(what, err) {
  if (!(err instanceof ApiError)) return `${what}: the page failed: ${err.message}.`;
  if (err.code === 'network') return `${what}: ${err.message}.`;
  return `${what}: the device refused — ${err.message} (${err.code}, HTTP ${err.status}).`;
}

function arr(x, key) {
  if (Array.isArray(x)) return x;
  if (x && Array.isArray(x[key])) return x[key];
  return [];
}

// ---------- login ----------

async function boot() {
  $('#logout').addEventListener('click', logout);
  document.addEventListener('visibilitychange', () => { if (!document.hidden && S.auth) schedule(0); });
  window.addEventListener('hashchange', route);
  let info;
  try {
    info = await api('GET', '/ui/session');
  } catch (e) {
    fill(main(), el('p', { class: 'msg bad', text: refusal('Could not reach the device', e) }));
    return;
  }
  setSession(info);
  if (!S.auth) showLogin('');
  else route();
}

function setSession(info) {
  S.auth = !!info.authenticated;
  S.loginRequired = !!info.login_required;
  S.csrf = info.csrf || '';
  S.name = info.name || S.name || localStorage.getItem('openstarry.name') || '';
  const who = $('#who');
  who.hidden = !S.auth;
  who.textContent = info.loopback ? 'On this device (loopback)' : S.name ? 'Signed in as ' + S.name : '';
  $('#logout').hidden = !(S.auth && S.csrf);
}

function showLogin(why) {
  stopTimer();
  S.page = 'login';
  document.title = 'Log in — OpenStarry Edge';
  for (const a of document.querySelectorAll('.top nav a')) a.removeAttribute('aria-current');
  const box = msgBox('login-msg');
  const form = el('form', { class: 'card', id: 'login-form', 'aria-labelledby': 'login-h' },
    el('h1', { id: 'login-h', text: 'Log in' }),
    el('p', { class: 'hint', text: 'This page is opened from another machine, so the device asks for its HTTP token (http.token, OPENSTARRY_HTTP_TOKEN). The browser keeps a session cookie; the token is not stored.' }),
    el('div', { class: 'field' },
      el('label', { for: 'login-token', text: 'Token' }),
      el('input', { id: 'login-token', name: 'token', type: 'password', autocomplete: 'current-password', required: true })),
    el('div', { class: 'field' },
      el('label', { for: 'login-name', text: 'Your name' }),
      el('input', { id: 'login-name', name: 'name', type: 'text', autocomplete: 'name', maxlength: '64', value: S.name }),
      el('p', { class: 'hint', id: 'login-name-hint', text: 'Recorded with the approvals you decide.' })),
    box,
    el('button', { type: 'submit', text: 'Log in' }));
  $('#login-name', form).setAttribute('aria-describedby', 'login-name-hint');
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const name = $('#login-name', form).value.trim();
    try {
      const info = await api('POST', '/ui/login', { token: $('#login-token', form).value, name });
      if (name) localStorage.setItem('openstarry.name', name);
      setSession(info);
      announce('Logged in');
      route();
    } catch (e) {
      showMsg(box, 'bad', refusal('Login failed', e));
      $('#login-token', form).focus();
    }
  });
  fill(main(), form);
  if (why) showMsg(box, 'bad', why);
  $('#login-token', form).focus();
}

async function logout() {
  try { await api('POST', '/ui/logout'); } catch (e) { banner(refusal('Log out', e)); }
  S.csrf = '';
  setSession({ authenticated: false });
  showLogin('');
}

// ---------- routing ----------

function stopTimer() {
  clearTimeout(S.timer);
  S.timer = 0;
}

function schedule(ms) {
  stopTimer();
  const page = S.page;
  S.timer = setTimeout(async () => {
    if (page !== S.page || !S.auth) return;
    if (document.hidden) { schedule(ms || POLL_PAGE_MS); return; } // paused while the tab is hidden
    let next = page === 'agents' ? POLL_AGENTS_MS : POLL_PAGE_MS;
    try {
      await PAGES[page].refresh();
      banner('');
    } catch (e) {
      if (e.status === 401) return;
      banner(refusal('Lost contact with the device; retrying', e));
      next = 5000;
    }
    if (page === S.page) schedule(next);
  }, ms);
}

const PAGES = {};

async function route() {
  if (!S.auth) { showLogin(''); return; }
  stopTimer();
  const parts = (location.hash.replace(/^#\/?/, '') || 'agents').split('/').map(decodeURIComponent);
  let page = parts[0];
  if (page === 'projects' && parts[1]) page = 'project';
  if (!PAGES[page]) page = 'agents';
  S.page = page;
  S.last = {};
  S.gen++;
  const navName = page === 'project' ? 'projects' : page;
  for (const a of document.querySelectorAll('.top nav a')) {
    if (a.dataset.page === navName) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  banner('');
  try {
    await PAGES[page].render(parts.slice(1));
  } catch (e) {
    if (e.status === 401) return;
    fill(main(), el('h1', { text: 'Error' }), el('p', { class: 'msg bad', text: refusal('Loading the page', e) }));
  }
  const h1 = $('h1', main());
  document.title = (h1 ? h1.textContent + ' — ' : '') + 'OpenStarry Edge';
  if (h1) { h1.tabIndex = -1; h1.focus({ preventScroll: true }); }
  schedule(page === 'agents' ? POLL_AGENTS_MS : POLL_PAGE_MS);
}

// changed reports whether the data of one part of a page differs from what
// is shown, so a refresh redraws only what changed (focus and typing stay).
function changed(key, data) {
  const s = JSON.stringify(data);
  if (S.last[key] === s) return false;
  S.last[key] = s;
  return true;
}

// ---------- fleet ----------

// The devices on the hub, from their retained status and telemetry (GET
// /fleet), and a task for the fleet (POST /fleet/tasks).
PAGES.fleet = {
  async render() {
    const gen = S.gen;
    let view = null;
    let err = null;
    try { view = await api('GET', '/fleet'); } catch (e) { if (e.status === 401) throw e; err = e; }
    if (gen !== S.gen) return;
    const input = el('textarea', { id: 'fleet-input', name: 'input', rows: '3', required: true,
      placeholder: 'hello, fleet', 'aria-describedby': 'fleet-input-hint' });
    const isJSON = el('input', { id: 'fleet-json', type: 'checkbox', name: 'json' });
    const result = el('div', { id: 'fleet-result', role: 'status', 'aria-live': 'polite' });
    const form = el('form', { class: 'card', id: 'fleet-form', 'aria-labelledby': 'fleet-task-h' },
      el('h2', { id: 'fleet-task-h', text: 'Send a task to the fleet' }),
      el('div', { class: 'field' }, el('label', { for: 'fleet-input', text: 'Input' }), input,
        el('p', { class: 'hint', id: 'fleet-input-hint',
          text: 'Published on the fleet topic: one device of the fleet takes it. Plain text is sent as a string; tick "JSON" for a JSON value.' })),
      el('div', { class: 'check' }, isJSON, el('label', { for: 'fleet-json', text: 'JSON' })),
      el('button', { type: 'submit', id: 'fleet-send', text: 'Publish' }),
      result);
    form.addEventListener('submit', (ev) => { ev.preventDefault(); sendFleetTask(input.value, isJSON.checked, result, form); });
    fill(main(),
      el('h1', { text: 'Fleet' }),
      el('p', { class: 'muted' }, 'The devices on the hub, as their retained status and telemetry say. Read again every 4 seconds. ',
        el('span', { id: 'fleet-updated' })),
      el('div', { id: 'fleet-table' }),
      err && err.code === 'no_hub' ? null : form);
    if (err) { this.fail(err); return; }
    this.draw(view);
  },
  async refresh() {
    let view;
    try { view = await api('GET', '/fleet'); } catch (e) { if (e.status === 401) throw e; this.fail(e); return; }
    this.draw(view);
  },
  fail(e) {
    const box = $('#fleet-table');
    if (!box) return;
    S.last.fleet = '';
    fill(box, el('p', { class: e.code === 'no_hub' ? 'msg info' : 'msg bad', id: 'fleet-error',
      text: e.code === 'no_hub' ? e.message : refusal('Reading the fleet', e) }));
  },
  draw(view) {
    const box = $('#fleet-table');
    if (!box) return;
    $('#fleet-updated').textContent = 'Hub ' + (view.hub || '') + ', read ' + fmtTime(view.time) + '.';
    const devices = arr(view, 'devices');
    if (!changed('fleet', devices)) return;
    if (!devices.length) { fill(box, el('p', { class: 'muted', text: 'No device has published its status on this hub yet.' })); return; }
    fill(box, table('Devices on the hub',
      ['Device', 'State', 'Version', 'Agents', 'Running tasks', 'Degraded', 'Last seen'], devices, (d) => {
        const t = d.telemetry || {};
        const agents = arr(t, 'agents');
        const running = agents.filter((a) => a.state === 'running').length;
        const tasks = agents.filter((a) => a.current_task);
        const degraded = agents.filter((a) => a.degraded);
        return [
          el('td', { class: 'mono wrap' }, d.device),
          el('td', {}, badge(d.state || 'unknown')),
          t.version || '—',
          el('td', { class: 'wrap' }, agents.length ? `${running}/${agents.length} running: ` + agents.map((a) => a.id).join(', ') : '—'),
          el('td', { class: 'wrap' }, tasks.length ? tasks.map((a) => el('div', { class: 'current-task' },
            el('code', { text: a.id }), ': task ', el('code', { text: a.current_task.task_id }),
            ` · ${a.current_task.tool ? 'tool ' + a.current_task.tool : a.current_task.phase} · ${fmtDur(a.current_task.elapsed_ms)}`)) : '—'),
          el('td', { class: 'wrap' }, degraded.length ? degraded.map((a) => el('div', { class: 'msg bad degraded' },
            el('code', { text: a.id }), `: template ${a.template} ${a.template_version} from the cache: ${clip(a.degraded_reason, 200)}`)) : '—'),
          t.time ? fmtTime(t.time) : '—',
        ];
      }));
  },
};

async function sendFleetTask(text, isJSON, result, form) {
  let input = text;
  if (isJSON) {
    try { input = JSON.parse(text); } catch (e) {
      fill(result, el('p', { class: 'msg bad', role: 'alert', text: 'The input is not valid JSON: ' + e.message }));
      $('#fleet-input').focus();
      return;
    }
  }
  const id = newTaskID();
  const btn = $('#fleet-send', form);
  btn.disabled = true;
  try {
    const r = await api('POST', '/fleet/tasks', { task_id: id, type: 'ui', input });
    fill(result, el('p', { class: 'msg info', id: 'fleet-outcome' }, 'Task ', el('code', { text: r.task_id }),
      ` published on ${r.topic}. The device that takes it answers on its agent's results topic.`));
    announce(`Task ${id} published to the fleet`);
  } catch (e) {
    if (e.status !== 401) fill(result, el('p', { class: 'msg bad', role: 'alert', text: refusal('The task was not published', e) }));
  } finally {
    btn.disabled = false;
  }
}

// ---------- agents ----------

PAGES.agents = {
  async render() {
    const gen = S.gen;
    const st = await api('GET', '/status');
    if (gen !== S.gen) return;
    const agents = arr(st, 'agents');
    const sel = el('select', { id: 'task-agent', name: 'agent', required: true },
      agents.map((a) => el('option', { value: a.id, text: `${a.id} (${a.role}, ${a.state})` })));
    const input = el('textarea', { id: 'task-input', name: 'input', rows: '4', required: true,
      placeholder: 'hello', 'aria-describedby': 'task-input-hint' });
    const isJSON = el('input', { id: 'task-json', type: 'checkbox', name: 'json' });
    const result = el('div', { id: 'task-result', role: 'status', 'aria-live': 'polite' });
    const form = el('form', { class: 'card', id: 'task-form', 'aria-labelledby': 'task-h' },
      el('h2', { id: 'task-h', text: 'Send a task' }),
      el('div', { class: 'field' }, el('label', { for: 'task-agent', text: 'Agent' }), sel),
      el('div', { class: 'field' }, el('label', { for: 'task-input', text: 'Input' }), input,
        el('p', { class: 'hint', id: 'task-input-hint',
          text: 'Plain text is sent as a string. Tick "JSON" to send a JSON value, e.g. {"call":[{"tool":"sleep_ms","args":{"ms":200}}]}.' })),
      el('div', { class: 'check' }, isJSON, el('label', { for: 'task-json', text: 'JSON' })),
      el('button', { type: 'submit', id: 'task-send', text: 'Send' }),
      result);
    form.addEventListener('submit', (ev) => { ev.preventDefault(); sendTask(sel.value, input.value, isJSON.checked, result, form); });
    fill(main(), 
      el('h1', { text: 'Agents' }),
      el('p', { class: 'muted' }, 'Live: the list is read again every 2 seconds while this page is visible. ',
        el('span', { id: 'agents-updated' })),
      el('div', { id: 'agents-table' }),
      form);
    this.draw(st);
  },
  async refresh() { this.draw(await api('GET', '/status')); },
  draw(st) {
    if (!$('#agents-table')) return; // the page changed meanwhile
    $('#agents-updated').textContent = 'Updated ' + fmtTime(new Date()) + '.';
    const agents = arr(st, 'agents');
    if (!changed('agents', agents.map((a) => [a.id, a.state, a.tick, a.queue, a.restarts, a.last_task, a.last_result, a.pid, a.last_error,
      a.current_task ? JSON.stringify(a.current_task) : '', a.template_version, a.template_source, a.degraded_reason]))) return;
    const box = $('#agents-table');
    if (!agents.length) { fill(box, el('p', { class: 'muted', text: 'No agents run in this daemon.' })); return; }
    fill(box, table('Agents of this daemon',
      ['Agent', 'Role', 'State', 'Tick', 'Queue', 'Restarts', 'Last result', 'Since'], agents, (a) => [
        el('td', { class: 'mono wrap' }, a.id),
        el('td', {}, a.role + (a.requester ? ' of ' + a.requester : ''),
          el('div', { class: 'hint wrap' }, 'template ', el('code', { text: a.template + (a.template_version ? ' ' + a.template_version : '') }),
            a.template_source ? ' (' + a.template_source + ')' : ''),
          a.degraded ? el('div', { class: 'msg bad degraded', text: 'Degraded: ' + clip(a.degraded_reason, 200) }) : null),
        el('td', {}, badge(a.state), a.current_task ? currentTask(a.current_task) : null,
          a.last_error ? el('div', { class: 'hint wrap', text: clip(a.last_error, 160) }) : null),
        el('td', { class: 'num', text: a.snapshot ? String(a.tick) : '—' }),
        el('td', { class: 'num', text: a.snapshot ? String(a.queue) : '—' }),
        el('td', { class: 'num', text: String(a.restarts) }),
        el('td', { class: 'wrap' }, a.last_task ? [el('code', { text: a.last_task }), ': ', clip(a.last_result, 160)] : '—'),
        fmtTime(a.since),
      ]));
    // keep the form's agent list in step without losing the selection
    const sel = $('#task-agent');
    if (sel) {
      const cur = sel.value;
      fill(sel, ...agents.map((a) => el('option', { value: a.id, text: `${a.id} (${a.role}, ${a.state})` })));
      if (agents.some((a) => a.id === cur)) sel.value = cur;
    }
  },
};

// currentTask shows the task an agent has in hand: its id, what it does
// (a tool, the model and the tokens it streamed), how long it has run and
// when it last progressed.
function currentTask(c) {
  const doing = c.tool ? 'tool ' + c.tool : c.phase + (c.tokens ? ` (${c.tokens} tokens)` : '');
  const ago = Math.max(0, Math.round((Date.now() - new Date(c.updated)) / 1000));
  return el('div', { class: 'hint wrap current-task' }, 'task ', el('code', { text: c.task_id }),
    ` · step ${c.step + 1} · ${doing} · ${fmtDur(c.elapsed_ms)} · last progress ${ago} s ago`);
}

function fmtDur(ms) {
  const s = Math.round((ms || 0) / 1000);
  return s < 60 ? `${s} s` : `${Math.floor(s / 60)} min ${s % 60} s`;
}

function newTaskID() {
  const b = new Uint8Array(4);
  crypto.getRandomValues(b);
  return 'ui-' + Date.now().toString(36) + '-' + Array.from(b, (x) => x.toString(16).padStart(2, '0')).join('');
}

async function sendTask(agent, text, isJSON, result, form) {
  let input = text;
  if (isJSON) {
    try { input = JSON.parse(text); } catch (e) {
      fill(result, el('p', { class: 'msg bad', role: 'alert', text: 'The input is not valid JSON: ' + e.message }));
      $('#task-input').focus();
      return;
    }
  }
  if (!agent) { fill(result, el('p', { class: 'msg bad', text: 'Choose an agent.' })); return; }
  const id = newTaskID();
  const btn = $('#task-send', form);
  btn.disabled = true;
  fill(result, el('p', { class: 'msg info', text: `Sending task ${id} to ${agent}…` }));
  const path = `/agents/${encodeURIComponent(agent)}/tasks`;
  try {
    await api('POST', path, { task_id: id, type: 'ui', input });
    fill(result, el('p', { class: 'msg info', text: `Task ${id} is stored by ${agent}; waiting for its result…` }));
    const deadline = Date.now() + 60000;
    let st;
    for (;;) {
      st = await api('GET', `${path}/${encodeURIComponent(id)}`);
      if (st.status !== 'queued' && st.status !== 'running') break;
      if (Date.now() > deadline) break;
      await new Promise((r) => setTimeout(r, 250));
    }
    const done = st.status !== 'queued' && st.status !== 'running';
    fill(result, el('div', { class: 'card', id: 'task-outcome' },
      el('h3', {}, 'Task ', el('code', { text: id }), ' ', badge(st.status)),
      done ? null : el('p', { class: 'hint', text: `Still ${st.status} after a minute; its result will be at GET ${path}/${id}.` }),
      st.error ? el('p', { class: 'msg bad', text: st.error }) : null,
      st.output !== undefined ? [el('h4', { text: 'Output' }), el('pre', { id: 'task-output', text: pretty(st.output) })] : null,
      st.tick_index ? el('p', { class: 'hint', text: 'At tick ' + st.tick_index + '.' }) : null));
    announce(`Task ${id}: ${st.status}`);
    PAGES.agents.refresh().catch(() => {});
  } catch (e) {
    if (e.status !== 401) fill(result, el('p', { class: 'msg bad', role: 'alert', text: refusal('The task was not sent', e) }));
  } finally {
    btn.disabled = false;
  }
}

// ---------- projects ----------

async function projectList() {
  return arr(await api('GET', '/projects'), 'projects');
}

// resumeButton is enabled only when the project's latest session was
// interrupted; its outcome goes to box, a message area that outlives the
// redraws of the button.
function resumeButton(p, box, onDone) {
  const interrupted = p.status === 'interrupted' && p.session_id;
  const btn = el('button', { type: 'button', class: 'resume', id: 'resume-' + p.id, disabled: !interrupted,
    'aria-describedby': 'resume-why-' + p.id, 'data-project': p.id, text: 'Resume' });
  const why = el('span', { class: 'hint', id: 'resume-why-' + p.id,
    text: interrupted ? `Continues ${p.session_id} in a new session.` : 'Enabled when the latest session was interrupted.' });
  btn.addEventListener('click', async () => {
    btn.disabled = true;
    showMsg(box, 'info', `Resuming ${p.name || p.id}…`);
    try {
      const res = await api('POST', `/projects/${encodeURIComponent(p.id)}/sessions/${encodeURIComponent(p.session_id)}/resume`);
      const ns = (res && res.session) || res || {};
      showMsg(box, 'ok', `Resumed ${p.name || p.id}: new session ${ns.id || '(see the history)'}, child of ${p.session_id}.`);
      announce('Resumed in session ' + (ns.id || ''));
      S.last = {};
      if (onDone) await onDone(ns.id);
    } catch (e) {
      if (e.status !== 401) showMsg(box, 'bad', refusal('Resume', e));
      btn.disabled = !interrupted;
    }
  });
  return el('div', { class: 'actions' }, btn, why);
}

PAGES.projects = {
  async render() {
    fill(main(), el('h1', { text: 'Projects' }),
      el('p', { class: 'muted', text: 'Each project with its latest session. Resume continues an interrupted session where it stopped; finished tasks are not run again.' }),
      el('div', { id: 'projects-msg', class: 'msg', role: 'status' }),
      el('div', { id: 'projects-list' }));
    await this.refresh();
  },
  async refresh() {
    const gen = S.gen;
    const ps = await projectList();
    // Each project's view has its latest session and its progress.
    const views = await Promise.all(ps.slice(0, 50).map((p) =>
      api('GET', `/projects/${encodeURIComponent(p.id)}`).catch(() => p)));
    if (gen !== S.gen || !changed('projects', views)) return;
    const box = $('#projects-list');
    if (!views.length) {
      fill(box, el('p', { class: 'muted', text: 'No projects yet. Create one with POST /projects (see docs/sessions.md).' }));
      return;
    }
    const hadFocus = document.activeElement && document.activeElement.id;
    fill(box, el('div', { class: 'grid' }, views.map((p) => {
      const ss = arr(p.sessions, 'sessions');
      const latest = ss.find((s) => s.id === p.session_id) || ss[ss.length - 1] || {};
      const pr = p.progress || {};
      return el('section', { class: 'card project', 'data-project': p.id, 'aria-labelledby': 'p-' + p.id },
        el('h2', { id: 'p-' + p.id }, el('a', { href: '#/projects/' + encodeURIComponent(p.id), text: p.name || p.id })),
        p.description ? el('p', { text: clip(p.description, 300) }) : null,
        el('dl', { class: 'kv' },
          el('dt', { text: 'Project' }), el('dd', { class: 'mono', text: p.id }),
          el('dt', { text: 'Latest session' }), el('dd', { class: 'mono', text: p.session_id || '—' }),
          el('dt', { text: 'State' }), el('dd', {}, badge(p.status || 'none'),
            latest.interruption_reason ? ' ' + latest.interruption_reason.replace(/_/g, ' ') : ''),
          latest.current_phase ? [el('dt', { text: 'Phase' }), el('dd', { text: String(latest.current_phase) })] : null,
          latest.current_task_id ? [el('dt', { text: 'Current task' }), el('dd', { class: 'mono', text: latest.current_task_id })] : null,
          pr.total ? [el('dt', { text: 'Progress' }), el('dd', {},
            el('progress', { max: '100', value: String(pr.percent || 0), 'aria-label': `${p.name || p.id} progress` }),
            ` ${pr.completed || 0} of ${pr.total} tasks completed`)] : null,
          el('dt', { text: 'Created' }), el('dd', { text: fmtTime(p.created_at) })),
        resumeButton(p, $('#projects-msg'), () => this.refresh()),
        el('p', {}, el('a', { href: '#/projects/' + encodeURIComponent(p.id), text: 'Session history, tasks and approaches' })));
    })));
    if (hadFocus && document.getElementById(hadFocus)) document.getElementById(hadFocus).focus();
  },
};

// sessionChain orders sessions root first, each followed by its children.
function sessionChain(sessions) {
  const byParent = {};
  const ids = new Set(sessions.map((s) => s.id));
  for (const s of sessions) {
    const k = s.parent_session_id && ids.has(s.parent_session_id) ? s.parent_session_id : '';
    (byParent[k] = byParent[k] || []).push(s);
  }
  for (const k in byParent) byParent[k].sort((a, b) => String(a.started_at).localeCompare(String(b.started_at)));
  const out = [];
  const walk = (k, depth) => { for (const s of byParent[k] || []) { out.push([s, depth]); walk(s.id, depth + 1); } };
  walk('', 0);
  return out;
}

PAGES.project = {
  async render(args) {
    this.id = args[0];
    fill(main(),
      el('p', {}, el('a', { href: '#/projects', text: '← Projects' })),
      el('h1', { id: 'project-name', text: this.id }),
      el('div', { id: 'project-head' }),
      el('div', { id: 'project-msg', class: 'msg', role: 'status' }),
      el('h2', { text: 'Session history' }), el('div', { id: 'sessions-box' }),
      el('h2', { text: 'Tasks' }), el('div', { id: 'tasks-box' }),
      el('h2', { text: 'Approaches' }), el('div', { id: 'approaches-box' }),
      el('h2', { text: 'Approvals' }), el('div', { id: 'project-approvals' }));
    await this.refresh();
  },
  async refresh() {
    const gen = S.gen;
    const id = this.id;
    const enc = encodeURIComponent(id);
    const [p, appr, apps] = await Promise.all([
      api('GET', `/projects/${enc}`),
      api('GET', `/projects/${enc}/approvals`),
      api('GET', `/projects/${enc}/approaches`),
    ]);
    if (gen !== S.gen || !changed('project', [p, appr, apps])) return;
    const sessions = arr(p.sessions, 'sessions');
    const tasks = arr(p, 'tasks');
    const approvals = arr(appr, 'approvals');
    const hadFocus = document.activeElement && document.activeElement.id;
    $('#project-name').textContent = p.name || id;
    fill($('#project-head'),
      p.description ? el('p', { text: p.description }) : null,
      el('dl', { class: 'kv' },
        el('dt', { text: 'Project' }), el('dd', { class: 'mono', text: p.id || id }),
        el('dt', { text: 'Latest session' }), el('dd', { class: 'mono', text: p.session_id || '—' }),
        el('dt', { text: 'State' }), el('dd', {}, badge(p.status || 'none'))),
      resumeButton(Object.assign({ id }, p), $('#project-msg'), () => this.refresh()));
    fill($('#sessions-box'), sessionsView(sessions));
    fill($('#tasks-box'), tasks.length ? table('Tasks of the plan', ['Task', 'Name', 'Phase', 'Status', 'Progress', 'Agent', 'Session'], tasks, (t) => [
      el('td', { class: 'mono wrap' }, t.id),
      el('td', { class: 'wrap' }, t.name || t.task_type || '', t.error ? el('div', { class: 'hint', text: clip(t.error, 200) }) : null,
        t.feedback ? el('div', { class: 'hint', text: 'Feedback: ' + clip(t.feedback, 200) }) : null,
        t.result !== undefined && t.result !== null ? el('div', { class: 'result' }, 'Result: ', el('span', { class: 'mono', text: resultText(t.result, 300) })) : null),
      el('td', { class: 'num', text: String(t.phase) }),
      el('td', {}, badge(t.state || t.status), t.attempt ? el('div', { class: 'hint', text: 'attempt ' + (t.attempt + 1) }) : null),
      el('td', {}, el('progress', { max: '100', value: String(t.progress_percent || 0), 'aria-label': `${t.id} progress` }), ` ${t.progress_percent || 0}%`),
      el('td', {}, t.role ? el('span', { text: t.role + ' ' }) : null, el('span', { class: 'mono', text: t.agent || t.assigned_to || '—' })),
      el('td', { class: 'mono wrap', text: t.session_id || '—' }),
    ]) : el('p', { class: 'muted', text: 'No tasks.' }));
    fill($('#approaches-box'), approachesView(apps));
    fill($('#project-approvals'),
      approvals.some((a) => a.status === 'pending')
        ? el('p', {}, 'Pending approvals are decided on the ', el('a', { href: '#/approvals', text: 'Approvals page' }), '.') : null,
      approvalHistory(approvals, false));
    if (hadFocus && document.getElementById(hadFocus)) document.getElementById(hadFocus).focus();
  },
};

function sessionsView(sessions) {
  if (!sessions.length) return el('p', { class: 'muted', text: 'No sessions.' });
  return el('ol', { class: 'chain', id: 'sessions' }, sessionChain(sessions).map(([s, depth]) => el('li', { 'data-session': s.id },
    el('div', { class: 'card' },
      el('h3', {}, el('span', { class: 'mono', text: s.id }), ' ', badge(s.status)),
      el('dl', { class: 'kv' },
        s.parent_session_id ? [el('dt', { text: 'Resumed from' }), el('dd', { class: 'mono', text: s.parent_session_id })] : null,
        el('dt', { text: 'Started' }), el('dd', { text: fmtTime(s.started_at) }),
        el('dt', { text: 'Ended' }), el('dd', { text: fmtTime(s.ended_at) }),
        el('dt', { text: 'Interruption' }), el('dd', { text: s.interruption_reason ? s.interruption_reason.replace(/_/g, ' ') : '—' }),
        el('dt', { text: 'Phase' }), el('dd', { text: s.current_phase ? String(s.current_phase) : '—' }),
        el('dt', { text: 'Current task' }), el('dd', { class: 'mono', text: [s.current_task_id, s.current_agent_role, s.current_agent_type, s.current_agent_id].filter(Boolean).join(' · ') || '—' }),
        el('dt', { text: 'Context summary' }), el('dd', { text: s.context_summary || '—' })),
      depth ? el('p', { class: 'visually-hidden', text: `Child session, generation ${depth + 1}.` }) : null))));
}

function approachesView(apps) {
  const groups = { verified: [], failed: [], untried: [] };
  if (Array.isArray(apps) || (apps && Array.isArray(apps.approaches))) {
    for (const r of arr(apps, 'approaches')) (groups[r.kind] = groups[r.kind] || []).push(Object.assign({ session_id: r.session_id }, r.approach || r));
  } else if (apps) {
    for (const k of Object.keys(groups)) groups[k] = arr(apps[k], k);
  }
  const titles = { verified: 'Verified', failed: 'Failed', untried: 'Untried' };
  return el('div', { class: 'approaches', id: 'approaches' }, Object.keys(groups).map((k) => el('section', { class: 'card', 'aria-labelledby': 'ap-' + k },
    el('h3', { id: 'ap-' + k }, titles[k] + ' ', badge(String(groups[k].length))),
    groups[k].length ? el('ul', {}, groups[k].map((a) => el('li', {},
      el('strong', { text: a.description }),
      a.category ? el('span', { class: 'muted', text: ' · ' + a.category }) : null,
      a.failure_reason ? el('div', { text: 'Why it failed: ' + a.failure_reason }) : null,
      a.error ? el('div', { class: 'mono', text: a.error }) : null,
      a.priority ? el('div', { text: 'Priority: ' + a.priority + (a.next_to_try ? ' · next to try' : '') }) : null,
      a.learnings && a.learnings.length ? el('div', { class: 'hint', text: 'Learnings: ' + a.learnings.join('; ') }) : null,
      a.avoid ? el('div', { class: 'hint', text: 'Avoid.' }) : null))) : el('p', { class: 'muted', text: 'None.' }))));
}

// ---------- approvals ----------

function approvalHistory(list, withProject) {
  const done = list.filter((a) => a.status !== 'pending');
  if (!done.length) return el('p', { class: 'muted', id: 'approval-history', text: 'No decisions yet.' });
  done.sort((a, b) => String(b.resolved_at || b.submitted_at).localeCompare(String(a.resolved_at || a.submitted_at)));
  const cols = ['#', 'Task', 'Checkpoint', 'Status', 'Submitted', 'Decided', 'By', 'Feedback', 'Result'];
  if (withProject) cols.splice(1, 0, 'Project');
  return el('div', { id: 'approval-history' }, table('Decided approvals', cols, done, (a) => {
    const cells = [
      el('td', { class: 'num', text: String(a.id) }),
      el('td', { class: 'mono wrap', text: a.task_id || '—' }),
      a.checkpoint_type || '—',
      el('td', {}, badge(a.status)),
      fmtTime(a.submitted_at),
      fmtTime(a.resolved_at),
      decidedBy(a),
      el('td', { class: 'wrap', text: a.feedback || '—' }),
      el('td', { class: 'wrap' }, a.result !== undefined ? resultText(a.result, 200) : '—', artifactList(a)),
    ];
    if (withProject) cells.splice(1, 0, el('td', { class: 'mono wrap' }, el('a', { href: '#/projects/' + encodeURIComponent(a.project_id), text: a.project_id })));
    return cells;
  }));
}

function decidedBy(a) {
  return a.decided_by || '—';
}

// resultText shows a task's result: a string as it is, anything else as
// indented JSON, clipped.
function resultText(r, n) {
  if (r === undefined || r === null) return '';
  return clip(typeof r === 'string' ? r : JSON.stringify(r, null, 2), n);
}

// artifactURL is where the device serves an artifact an approval names
// (a path under projects/{p}/sessions/{s}/artifacts/, or one relative to
// the approval's session's artifacts/).
function artifactURL(a, path) {
  const p = String(path);
  const m = p.match(/^projects\/([^/]+)\/sessions\/([^/]+)\/artifacts\/(.+)$/);
  const [proj, sess, rel] = m ? [m[1], m[2], m[3]] : [a.project_id, a.session_id, p.replace(/^\/+/, '')];
  return `/projects/${encodeURIComponent(proj)}/sessions/${encodeURIComponent(sess)}/artifacts/` +
    rel.split('/').map(encodeURIComponent).join('/');
}

// MAX_PREVIEW is how much of a text artifact a card shows.
const MAX_PREVIEW = 16384;

// artifactList lets a reviewer open what the task wrote: each file a link
// (the device serves text inline, anything else as a download) and a
// Show button that puts the start of a text file in the card.
function artifactList(a) {
  const list = [].concat(a.artifacts || []);
  if (!list.length) return null;
  return el('ul', { class: 'artifacts' }, list.map((path, i) => {
    const url = artifactURL(a, path);
    const name = String(path).split('/').pop();
    const pre = el('pre', { class: 'preview', hidden: '' });
    const show = el('button', { type: 'button', class: 'quiet', 'aria-expanded': 'false', text: 'Show',
      'aria-label': `Show ${name}` });
    show.addEventListener('click', async () => {
      if (!pre.hidden) { pre.hidden = true; show.setAttribute('aria-expanded', 'false'); show.textContent = 'Show'; return; }
      try {
        const res = await fetch(url, { credentials: 'same-origin', cache: 'no-store', headers: { Range: `bytes=0-${MAX_PREVIEW - 1}` } });
        const type = res.headers.get('Content-Type') || '';
        if (!res.ok) throw new Error(`${res.status} ${res.statusText}`);
        if (!type.startsWith('text/plain')) {
          pre.textContent = 'Not text: use the link to download it.';
        } else {
          const total = (res.headers.get('Content-Range') || '').split('/')[1];
          const text = await res.text();
          pre.textContent = text + (total && +total > MAX_PREVIEW ? `\n… (${total} bytes in all: open the link for the whole file)` : '');
        }
      } catch (e) {
        pre.textContent = 'Could not read it: ' + e.message;
      }
      pre.hidden = false;
      show.setAttribute('aria-expanded', 'true');
      show.textContent = 'Hide';
    });
    return el('li', { 'data-artifact': String(i) },
      el('a', { href: url, target: '_blank', rel: 'noopener', class: 'mono', text: name }), ' ', show, pre);
  }));
}

function pendingCard(a) {
  const fid = 'fb-' + a.id;
  const box = el('div', { class: 'msg', role: 'alert' });
  const fb = el('textarea', { id: fid, name: 'feedback', rows: '3', 'aria-describedby': fid + '-hint' });
  const card = el('section', { class: 'card pending', 'data-approval': String(a.id), 'aria-labelledby': 'ah-' + a.id },
    el('h3', { id: 'ah-' + a.id }, `Approval #${a.id}: `, el('span', { class: 'mono', text: a.task_id || '' }), ' ', badge('pending')),
    el('dl', { class: 'kv' },
      el('dt', { text: 'Project' }), el('dd', {}, el('a', { href: '#/projects/' + encodeURIComponent(a.project_id), text: a.project_id })),
      el('dt', { text: 'Session' }), el('dd', { class: 'mono', text: a.session_id }),
      el('dt', { text: 'Checkpoint' }), el('dd', { text: a.checkpoint_type || '—' }),
      el('dt', { text: 'Asked by' }), el('dd', { text: a.leader_id || '—' }),
      el('dt', { text: 'Submitted' }), el('dd', { text: fmtTime(a.submitted_at) }),
      a.instruction_content ? [el('dt', { text: 'Instruction' }), el('dd', { text: a.instruction_content })] : null,
      a.result !== undefined && a.result !== null ? [el('dt', { text: 'Result' }), el('dd', {}, el('pre', { class: 'result', text: resultText(a.result, 4000) }))] : null,
      a.artifacts && a.artifacts.length ? [el('dt', { text: 'Artifacts' }), el('dd', {}, artifactList(a))] : null,
      a.revision_history && a.revision_history.length ? [el('dt', { text: 'Earlier rounds' }), el('dd', {}, el('ol', { class: 'rounds' },
        a.revision_history.map((r) => el('li', {}, `attempt ${(r.attempt || 0) + 1}: ${String(r.status).replace(/_/g, ' ')}`,
          r.by ? ` by ${r.by}` : '', r.at ? `, ${fmtTime(r.at)}` : '', r.feedback ? ` — “${clip(r.feedback, 300)}”` : '',
          r.result !== undefined ? el('div', { class: 'hint', text: 'Its result: ' + resultText(r.result, 300) }) : null))))] : null),
    el('div', { class: 'field' },
      el('label', { for: fid, text: 'Feedback' }), fb,
      el('p', { class: 'hint', id: fid + '-hint', text: 'Optional for Approve and Reject; needed for Request revision (the task runs again with it).' })),
    el('div', { class: 'actions', role: 'group', 'aria-label': `Decide approval ${a.id}` },
      el('button', { type: 'button', 'data-decision': 'approve', text: 'Approve' }),
      el('button', { type: 'button', class: 'danger', 'data-decision': 'reject', text: 'Reject' }),
      el('button', { type: 'button', class: 'quiet', 'data-decision': 'revise', text: 'Request revision' })),
    box);
  for (const b of card.querySelectorAll('button[data-decision]')) {
    b.addEventListener('click', () => decide(a, b.dataset.decision, fb, card, box));
  }
  return card;
}

async function decide(a, decision, fb, card, box) {
  const feedback = fb.value.trim();
  if (decision === 'revise' && !feedback) {
    showMsg(box, 'bad', 'A revision request needs feedback: say what to change.');
    fb.focus();
    return;
  }
  const buttons = card.querySelectorAll('button');
  buttons.forEach((b) => { b.disabled = true; });
  showMsg(box, 'info', 'Sending the decision…');
  try {
    const who = $('#decider');
    const by = who ? who.value.trim() : S.name;
    await api('POST', `/approvals/${encodeURIComponent(a.id)}`, by ? { decision, feedback, decided_by: by } : { decision, feedback });
    const word = { approve: 'approved', reject: 'rejected', revise: 'sent back for revision' }[decision];
    announce(`Approval ${a.id} ${word}`);
    S.last = {};
    await PAGES.approvals.refresh();
    const h = $('#approvals-msg');
    if (h) showMsg(h, 'ok', `Approval #${a.id} ${word}.`);
  } catch (e) {
    buttons.forEach((b) => { b.disabled = false; });
    if (e.status !== 401) showMsg(box, 'bad', refusal('The decision was not recorded', e));
  }
}

PAGES.approvals = {
  async render() {
    const who = el('input', { id: 'decider', type: 'text', name: 'decided_by', maxlength: '128', autocomplete: 'name',
      value: S.name, 'aria-describedby': 'decider-hint' });
    who.addEventListener('change', () => {
      S.name = who.value.trim();
      localStorage.setItem('openstarry.name', S.name);
    });
    fill(main(), el('h1', { text: 'Approvals' }),
      el('div', { class: 'field' }, el('label', { for: 'decider', text: 'Your name' }), who,
        el('p', { class: 'hint', id: 'decider-hint', text: 'Recorded with each decision taken here, and its time. Works with the hub and the internet out of reach: the decision is kept on this device.' })),
      el('div', { id: 'approvals-msg', class: 'msg', role: 'status' }),
      el('h2', { text: 'Pending' }),
      el('div', { id: 'pending' }),
      el('h2', { text: 'History' }),
      el('div', { id: 'history' }));
    await this.refresh();
  },
  async refresh() {
    const gen = S.gen;
    const all = arr(await api('GET', '/approvals'), 'approvals');
    if (gen !== S.gen) return;
    const pending = all.filter((a) => a.status === 'pending').sort((a, b) => a.id - b.id);
    // Pending cards are kept as they are (a half-typed feedback stays);
    // only the ones decided go and new ones come.
    const box = $('#pending');
    if (!box) return;
    const keep = new Set(pending.map((a) => String(a.id)));
    for (const c of box.querySelectorAll('[data-approval]')) if (!keep.has(c.dataset.approval)) c.remove();
    const empty = $('#no-pending', box);
    if (empty) empty.remove();
    for (const a of pending) if (!box.querySelector(`[data-approval="${a.id}"]`)) box.append(pendingCard(a));
    if (!pending.length) box.append(el('p', { class: 'muted', id: 'no-pending', text: 'Nothing waits for a decision.' }));
    if (changed('history', all.filter((a) => a.status !== 'pending'))) fill($('#history'), approvalHistory(all, true));
  },
};

boot();
