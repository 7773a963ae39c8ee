// The projections panel: every few seconds it reads ../v1/projections
// (every projection instance with the node running it, its offset, lag
// and pause flag — the same on every node) and draws one row per
// instance. The panel stays hidden while the node runs no projection.
'use strict';
(() => {
  const POLL_MS = 3000;
  const panel = document.getElementById('projections');
  const body = document.getElementById('projection-rows');
  const note = document.getElementById('projections-status');
  if (!panel || !body) return;

  function h(tag, attrs = {}, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    node.append(...children);
    return node;
  }

  function lag(inst) {
    const seconds = typeof inst.lagSeconds === 'number' ? `${inst.lagSeconds.toFixed(1)} s` : '—';
    return typeof inst.lagEvents === 'number' ? `${seconds} · ${inst.lagEvents} events` : seconds;
  }

  function render(list) {
    const rows = [];
    for (const p of list) {
      if (!p || typeof p.name !== 'string' || !Array.isArray(p.instances)) continue;
      for (const inst of p.instances) {
        const paused = inst.paused === true;
        rows.push(h('tr', { class: 'projection', 'data-projection': p.name, 'data-instance': String(inst.instance),
          'data-node': String(inst.node || ''), 'data-paused': String(paused) },
          h('td', {}, p.name), h('td', {}, String(inst.instance)), h('td', {}, inst.node || '—'),
          h('td', { class: 'offset' }, String(inst.offset || '')), h('td', {}, lag(inst)),
          h('td', {}, paused ? 'paused' : 'running'),
          h('td', { class: 'error' }, typeof inst.lastError === 'string' ? inst.lastError : '')));
      }
    }
    body.replaceChildren(...rows);
    panel.hidden = rows.length === 0;
  }

  async function poll() {
    try {
      const res = await fetch('../v1/projections', { headers: { Accept: 'application/json' }, cache: 'no-store' });
      if (!res.ok) throw new Error(`${res.status} ${res.statusText}`);
      const data = await res.json();
      render(Array.isArray(data && data.projections) ? data.projections : []);
      note.textContent = `updated ${new Date().toLocaleTimeString()}`;
      panel.dataset.stale = 'false';
    } catch (err) {
      note.textContent = `cannot read the projections (${err.message})`;
      panel.dataset.stale = 'true';
    }
    setTimeout(poll, POLL_MS);
  }
  poll();
})();
