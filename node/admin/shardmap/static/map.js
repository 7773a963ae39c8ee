// The live shard map. It lists the entity types from ../v1/types, follows
// ../v1/shards/{type}/stream (server-sent events named "shards", each the
// JSON of GET ../v1/shards/{type}) and draws nodes as columns and shards as
// cells. Every URL is relative to the page, so it works under any prefix.
'use strict';
(() => {
  const RETRY_MIN_MS = 500;
  const RETRY_MAX_MS = 5000;
  const STATES = new Set(['active', 'handing-off', 'unallocated']);

  const el = {
    type: document.getElementById('type'),
    connection: document.getElementById('connection'),
    coordinator: document.getElementById('coordinator'),
    epoch: document.getElementById('epoch'),
    shardTotal: document.getElementById('shard-total'),
    entityTotal: document.getElementById('entity-total'),
    map: document.getElementById('map'),
  };

  let type = '';
  let source = null;      // the open EventSource, if any
  let retryTimer = 0;
  let failures = 0;       // in a row, for the back-off
  let previous = new Map(); // shard id -> "node|state" of the last render, to flash changes

  // h builds an element; text children go in as text, never as HTML.
  function h(tag, attrs = {}, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    node.append(...children);
    return node;
  }

  function setConnection(state, text) {
    el.connection.dataset.state = state;
    el.connection.textContent = text;
    el.map.dataset.stale = String(state === 'disconnected');
  }

  function showMessage(text) {
    el.map.replaceChildren(h('p', { class: 'empty' }, text));
  }

  // scheduleRetry shows the page as disconnected and calls again after a
  // back-off that doubles up to RETRY_MAX_MS. The state stays "disconnected"
  // through the attempts, until a stream opens.
  function scheduleRetry(again, reason) {
    const delay = Math.min(RETRY_MIN_MS * 2 ** failures, RETRY_MAX_MS);
    failures++;
    setConnection('disconnected', `Disconnected: ${reason}. Retrying in ${Math.ceil(delay / 1000)} s…`);
    clearTimeout(retryTimer);
    retryTimer = setTimeout(again, delay);
  }

  async function errorText(res) {
    try {
      const body = await res.json();
      if (body && typeof body.error === 'string') return `${res.status} ${body.error}`;
    } catch (_) { /* not JSON: the status says enough */ }
    return `${res.status} ${res.statusText}`;
  }

  // showLogin asks for the admin token when the node's reads need it
  // (EventSource cannot send an Authorization header): the token is POSTed
  // once to ../v1/session, which answers with an HttpOnly, SameSite=Strict
  // cookie that opens the reads. The token itself is never stored here.
  function showLogin(reason) {
    clearTimeout(retryTimer);
    if (source) { source.close(); source = null; }
    setConnection('login', 'Sign in: this node needs the admin token to show its shards');
    const input = h('input', { type: 'password', id: 'token', autocomplete: 'current-password', required: '' });
    const error = h('p', { id: 'login-error', class: 'error', role: 'alert' }, reason || '');
    const form = h('form', { id: 'login', class: 'login' },
      h('label', { for: 'token' }, 'Admin token'), input, h('button', { type: 'submit' }, 'Sign in'), error);
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      let res;
      try {
        res = await fetch('../v1/session', {
          method: 'POST', credentials: 'same-origin', cache: 'no-store',
          headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ token: input.value }),
        });
      } catch (err) {
        error.textContent = `Cannot reach the node (${err.message})`;
        return;
      }
      if (!res.ok) {
        error.textContent = await errorText(res);
        input.select();
        return;
      }
      el.map.replaceChildren(h('p', { class: 'empty' }, 'Loading…'));
      start();
    });
    el.map.replaceChildren(form);
    input.focus();
  }

  async function start() {
    let types;
    try {
      const res = await fetch('../v1/types', { headers: { Accept: 'application/json' }, cache: 'no-store', credentials: 'same-origin' });
      if (res.status === 401) {
        showLogin('');
        return;
      }
      if (!res.ok) throw new Error(await errorText(res));
      const body = await res.json();
      if (!body || !Array.isArray(body.types)) throw new Error('no "types" list in the answer');
      types = body.types.filter((t) => typeof t === 'string' && t !== '');
    } catch (err) {
      scheduleRetry(start, `cannot list the entity types (${err.message})`);
      return;
    }
    const wanted = new URLSearchParams(location.search).get('type') || '';
    const all = wanted && !types.includes(wanted) ? [wanted, ...types] : types;
    el.type.replaceChildren(...all.map((t) => new Option(t, t)));
    el.type.disabled = all.length === 0;
    if (all.length === 0) {
      failures = 0;
      setConnection('connecting', 'No entity types yet; looking again shortly…');
      showMessage('This node runs no entity types yet.');
      retryTimer = setTimeout(start, RETRY_MAX_MS);
      return;
    }
    follow(wanted || (all.includes(type) ? type : all[0]));
  }

  function follow(t) {
    type = t;
    previous = new Map();
    el.type.value = t;
    el.map.dataset.type = t;
    document.title = `${t} · Shard map · Shoal`;
    connect();
  }

  // reconnect follows the same type again, unless the reads now answer
  // 401 (the session cookie expired): then it asks for the token again.
  async function reconnect() {
    try {
      const res = await fetch('../v1/types', { cache: 'no-store', credentials: 'same-origin' });
      if (res.status === 401) {
        showLogin('The session ended: sign in again.');
        return;
      }
    } catch (_) { /* unreachable: the stream's own retry says so */ }
    connect();
  }

  function connect() {
    clearTimeout(retryTimer);
    if (source) source.close();
    const es = new EventSource(`../v1/shards/${encodeURIComponent(type)}/stream`);
    source = es;
    es.addEventListener('open', () => {
      if (source !== es) return;
      failures = 0;
      setConnection('live', 'Live');
    });
    es.addEventListener('shards', (ev) => {
      if (source !== es) return;
      let snap;
      try {
        snap = parseSnapshot(JSON.parse(ev.data, exactNumbers));
      } catch (err) {
        setConnection('live', `Live; ignored a bad update (${err.message})`);
        return;
      }
      render(snap);
      setConnection('live', `Live · updated ${new Date().toLocaleTimeString()}`);
    });
    es.addEventListener('error', () => {
      if (source !== es) return;
      // EventSource reconnects by itself after a clean end of the stream, but
      // gives up for good on an HTTP error. Close it and retry here in both
      // cases, so both show the same "disconnected" state and back-off.
      es.close();
      source = null;
      scheduleRetry(reconnect, 'lost the update stream');
    });
  }

  // exactNumbers keeps incarnations and epochs as the digits sent: they are
  // uint64s, and above 2^53 a JavaScript number rounds them (where the
  // browser has JSON.parse source access; else parseSnapshot matches the
  // rounded number against the node list).
  function exactNumbers(key, value, context) {
    if ((key === 'incarnation' || key === 'epoch') && typeof value === 'number' && context && context.source) {
      return context.source;
    }
    return value;
  }

  // coordinatorID names the coordinator's incarnation as the node list does.
  function coordinatorID(c, nodes) {
    if (c.incarnation == null) return c.node;
    if (typeof c.incarnation === 'string') return `${c.node}#${c.incarnation}`;
    const prefix = `${c.node}#`;
    const match = nodes.find((n) => n.startsWith(prefix) && Number(n.slice(prefix.length)) === c.incarnation);
    return match || `${prefix}${c.incarnation}`;
  }

  // parseSnapshot checks the shape of one map and fills in defaults, so
  // render deals with clean values only.
  function parseSnapshot(raw) {
    if (!raw || typeof raw !== 'object' || !Array.isArray(raw.shards)) throw new Error('no "shards" list');
    const shards = raw.shards.map((s) => ({
      id: String(s.id),
      node: typeof s.node === 'string' ? s.node : '',
      state: STATES.has(s.state) ? s.state : 'unallocated',
      entities: Number.isFinite(s.entities) && s.entities >= 0 ? s.entities : 0,
    }));
    const nodes = Array.isArray(raw.nodes) ? raw.nodes.filter((n) => typeof n === 'string' && n !== '') : [];
    const c = raw.coordinator;
    const coordinator = c && typeof c.node === 'string' && c.node !== ''
      ? { id: coordinatorID(c, nodes), epoch: c.epoch }
      : null;
    return { nodes, shards, coordinator };
  }

  function render(snap) {
    const columns = new Map(); // node id -> its shards, in the order given
    for (const n of snap.nodes) columns.set(n, []);
    const unallocated = [];
    for (const s of snap.shards) {
      if (s.state === 'unallocated' || s.node === '') {
        unallocated.push(s);
        continue;
      }
      if (!columns.has(s.node)) columns.set(s.node, []);
      columns.get(s.node).push(s);
    }

    const seen = new Map();
    const parts = [];
    for (const [node, shards] of columns) {
      parts.push(column(node, node, shards, snap.coordinator && snap.coordinator.id === node, seen));
    }
    if (unallocated.length > 0) parts.push(column('', 'Unallocated', unallocated, false, seen));
    if (parts.length === 0) parts.push(h('p', { class: 'empty' }, 'No nodes and no shards yet.'));
    el.map.replaceChildren(...parts);
    el.map.setAttribute('aria-busy', 'false');
    previous = seen;

    const entities = snap.shards.reduce((sum, s) => sum + s.entities, 0);
    el.shardTotal.textContent = String(snap.shards.length);
    el.entityTotal.textContent = String(entities);
    el.coordinator.textContent = snap.coordinator ? snap.coordinator.id : 'none';
    el.coordinator.dataset.node = snap.coordinator ? snap.coordinator.id : '';
    const epoch = snap.coordinator && snap.coordinator.epoch != null ? String(snap.coordinator.epoch) : '';
    el.epoch.textContent = epoch || '—';
    el.epoch.dataset.epoch = epoch;
  }

  function column(node, title, shards, isCoordinator, seen) {
    const entities = shards.reduce((sum, s) => sum + s.entities, 0);
    const header = h('header', {}, h('h2', {}, title));
    if (isCoordinator) header.append(h('span', { class: 'badge', title: 'runs the coordinator of this type' }, 'coordinator'));
    header.append(h('p', { class: 'counts' },
      h('span', { 'data-role': 'node-shards' }, String(shards.length)), shards.length === 1 ? ' shard · ' : ' shards · ',
      h('span', { 'data-role': 'node-entities' }, String(entities)), entities === 1 ? ' entity' : ' entities'));
    const list = h('ol', { class: 'shards', 'aria-label': `Shards: ${title}` });
    for (const s of shards) {
      const where = node ? `${s.state} on ${node}` : 'unallocated';
      const cell = h('li', {
        class: 'shard',
        'data-shard': s.id,
        'data-node': node,
        'data-state': s.state,
        'data-entities': String(s.entities),
        title: `shard ${s.id}: ${where}, ${s.entities} entities`,
        'aria-label': `shard ${s.id}, ${where}, ${s.entities} entities`,
      }, h('span', { class: 'id' }, s.id), h('span', { class: 'n', 'aria-hidden': 'true' }, String(s.entities)));
      const key = `${node}|${s.state}`;
      if (previous.has(s.id) && previous.get(s.id) !== key) cell.classList.add('changed');
      seen.set(s.id, key);
      list.append(cell);
    }
    return h('section', { class: node ? 'node' : 'node unallocated', 'data-node': node }, header, list);
  }

  el.type.addEventListener('change', () => {
    const url = new URL(location.href);
    url.searchParams.set('type', el.type.value);
    history.replaceState(null, '', url);
    failures = 0;
    showMessage('Loading…');
    setConnection('connecting', 'Connecting…');
    follow(el.type.value);
  });

  start();
})();
