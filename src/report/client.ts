/**
 * The report page's script. It runs in the browser, inlined into the page as the text of this
 * one function (page.ts), so it must not refer to anything outside itself: no imports, no
 * module-level names. It reads the data from the page (data.ts), then draws and redraws the
 * flame graph, the tables and the growth view as the reader zooms, searches, filters and
 * switches the sample type. No network, no storage: the page is a file.
 */
export async function reportClient(): Promise<void> {
  type Data = import('./data.js').ReportData;
  type PData = import('./data.js').ProfileData;
  performance.mark('report-start');
  // gzipped JSON in base64 (page.ts)
  const packed = atob(document.getElementById('report-data')!.textContent!.trim());
  const raw = new Uint8Array(packed.length);
  for (let i = 0; i < packed.length; i++) raw[i] = packed.charCodeAt(i);
  performance.mark('report-decoded');
  const json = await new Response(new Blob([raw]).stream().pipeThrough(new DecompressionStream('gzip'))).text();
  performance.mark('report-inflated');
  const data = JSON.parse(json) as Data;
  for (const p of data.profiles) {
    const parent = p.nodes.parent; // stored as node − parent (page.ts)
    parent[0] = -1;
    for (let i = 1; i < parent.length; i++) parent[i] = i - parent[i]!;
  }
  performance.mark('report-data');
  const $ = <T extends HTMLElement>(id: string) => document.getElementById(id) as T;

  /** Bars drawn at most: a deep profile's flame graph stays light (the rest are under a pixel wide). */
  const MAX_BARS = 3000;
  const state = {
    profile: data.profiles.length - 1,
    type: 0,
    zoom: 0,
    search: '',
    // the Top table opens on where the memory is (flat), not on the root frames every stack passes through
    sort: 'flat' as 'flat' | 'cum' | 'name',
    excluded: {} as Record<string, Set<string>>,
  };

  const fmt = (v: number, unit: string): string => {
    if (unit !== 'bytes') return Math.round(v).toLocaleString('en-US');
    const a = Math.abs(v);
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let u = 0;
    let x = a;
    while (x >= 1024 && u < units.length - 1) {
      x /= 1024;
      u++;
    }
    return `${v < 0 ? '-' : ''}${u === 0 ? Math.round(x) : x.toFixed(x < 10 ? 2 : 1)}${units[u]}`;
  };
  const pct = (x: number, total: number) => (total === 0 ? '0.00%' : `${((100 * x) / total).toFixed(2)}%`);
  const el = (tag: string, attrs: Record<string, string> = {}, text?: string): HTMLElement => {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    return e;
  };

  // ---- per-profile derived structures (static) ----
  let d: PData;
  // children of trie node i: kids[start[i] .. start[i + 1]), by name (compressed rows: one
  // array for the whole tree, since a deep profile has hundreds of thousands of nodes)
  let start: Int32Array = new Int32Array(1);
  let kids: Int32Array = new Int32Array(0);
  const display = (f: number) => (d.frames.js[f] && d.frames.file[f] ? `${d.frames.name[f]} ${d.frames.file[f]}:${d.frames.line[f]}` : d.frames.name[f]!);

  function load(index: number): void {
    d = data.profiles[index]!;
    const n = d.nodes.parent.length;
    const parent = d.nodes.parent;
    start = new Int32Array(n + 1);
    for (let i = 1; i < n; i++) start[parent[i]! + 1]!++;
    for (let i = 0; i < n; i++) start[i + 1] = start[i + 1]! + start[i]!;
    kids = new Int32Array(Math.max(0, n - 1));
    const fill = start.slice(0, n);
    for (let i = 1; i < n; i++) kids[fill[parent[i]!]!++] = i;
    const nameOf = (x: number) => d.frames.name[d.nodes.frame[x]!]!;
    for (let i = 0; i < n; i++) {
      if (start[i + 1]! - start[i]! < 2) continue;
      const seg = Array.from(kids.subarray(start[i]!, start[i + 1]!)).sort((a, b) => (nameOf(a) < nameOf(b) ? -1 : nameOf(a) > nameOf(b) ? 1 : a - b));
      kids.set(seg, start[i]!);
    }
    state.type = d.defaultType;
    state.zoom = 0;
    state.excluded = {};
    buildControls();
    buildHeader();
  }

  const passes = (i: number): boolean => {
    const labels = d.labelSets[d.samples.labels[i]!]!;
    for (const [k, values] of Object.entries(state.excluded)) if (values.size > 0 && labels[k] !== undefined && values.has(labels[k]!)) return false;
    return true;
  };

  /** Per trie node: the value of the samples beneath it, for every sample type. */
  function aggregate(): Float64Array[] {
    const n = d.nodes.parent.length;
    const out = d.sampleTypes.map(() => new Float64Array(n));
    d.samples.node.forEach((leaf, i) => {
      if (!passes(i)) return;
      for (let t = 0; t < out.length; t++) {
        const v = d.samples.values[t]![i]!;
        if (v === 0) continue;
        const acc = out[t]!;
        for (let x = leaf; x >= 0; x = d.nodes.parent[x]!) acc[x] = acc[x]! + v;
      }
    });
    return out;
  }

  /** The search as a regular expression; an invalid one is matched as plain text, and the page says so (searchError). */
  let searchError = '';
  function searchRegex(): RegExp | undefined {
    searchError = '';
    if (state.search === '') return undefined;
    try {
      return new RegExp(state.search, 'i');
    } catch (e) {
      searchError = `not a valid regular expression (${e instanceof Error ? e.message.replace(/^Invalid regular expression: /, '') : String(e)}): matched as plain text`;
      return new RegExp(state.search.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'), 'i');
    }
  }

  // ---- controls ----
  function buildControls(): void {
    const types = $<HTMLSelectElement>('type');
    types.textContent = '';
    d.sampleTypes.forEach((t, i) => {
      const o = el('option', { value: String(i) }, `${t.type} (${t.unit})`) as HTMLOptionElement;
      if (i === state.type) o.selected = true;
      types.append(o);
    });
    const filters = $('filters');
    filters.textContent = '';
    const keys = new Map<string, Set<string>>();
    for (const set of d.labelSets) for (const [k, v] of Object.entries(set)) (keys.get(k) ?? keys.set(k, new Set()).get(k)!).add(v);
    for (const [key, values] of [...keys].sort()) {
      if (values.size < 2 && key !== 'heap') continue;
      const group = el('fieldset', { class: 'filter', 'data-key': key });
      group.append(el('legend', {}, key));
      for (const v of [...values].sort()) {
        const label = el('label');
        const box = el('input', { type: 'checkbox', 'data-key': key, value: v }) as HTMLInputElement;
        box.checked = true;
        box.addEventListener('change', () => {
          const set = (state.excluded[key] ??= new Set());
          if (box.checked) set.delete(v);
          else set.add(v);
          draw();
        });
        label.append(box, document.createTextNode(` ${v}`));
        group.append(label);
      }
      filters.append(group);
    }
  }

  function buildHeader(): void {
    const table = $('header');
    table.textContent = '';
    for (const [k, v] of d.header) {
      const tr = el('tr');
      tr.append(el('th', {}, k), el('td', {}, v));
      table.append(tr);
    }
  }

  // ---- drawing ----
  let values: Float64Array[] = [];

  function draw(): void {
    values = aggregate();
    performance.mark('report-aggregated');
    drawFlame();
    performance.mark('report-flame');
    drawSearch();
    drawTop();
    drawJs();
  }

  function drawFlame(): void {
    const box = $('flame');
    box.textContent = '';
    const width = box.clientWidth || 1200;
    const unit = d.sampleTypes[state.type]!.unit;
    const v = values[state.type]!;
    const re = searchRegex();
    const rowH = 18;
    // the zoomed node's ancestors, full width above it
    const chain: number[] = [];
    for (let x = state.zoom; x > 0; x = d.nodes.parent[x]!) chain.unshift(x);
    const rootValue = v[state.zoom]!;
    let rows = 0;
    let drawn = 0;
    const bar = (node: number, x: number, w: number, row: number, ancestor: boolean) => {
      const f = d.nodes.frame[node]!;
      const name = node === 0 ? 'all' : display(f);
      const div = el('div', { class: `fg${ancestor ? ' ancestor' : ''}${d.frames.js[f] ? ' js' : ''}`, 'data-node': String(node) }, name);
      div.style.left = `${x}px`;
      div.style.top = `${row * rowH}px`;
      div.style.width = `${Math.max(1, w - 1)}px`;
      if (node !== 0 && re && re.test(name)) div.classList.add('match');
      div.style.setProperty('--h', String(hue(d.frames.name[f] ?? 'all')));
      box.append(div);
      drawn++;
      rows = Math.max(rows, row + 1);
    };
    bar(0, 0, width, 0, state.zoom !== 0);
    chain.forEach((x, i) => bar(x, 0, width, i + 1, x !== state.zoom));
    const base = chain.length;
    const walk = (node: number, x: number, w: number, row: number) => {
      let cx = x;
      for (let k = start[node]!; k < start[node + 1]!; k++) {
        const c = kids[k]!;
        const cw = rootValue > 0 ? (v[c]! / rootValue) * width : 0;
        if (cw >= 0.5 && drawn < MAX_BARS) {
          bar(c, cx, cw, row, false);
          walk(c, cx, cw, row + 1);
        }
        cx += cw;
      }
    };
    if (rootValue > 0) walk(state.zoom, 0, width, base + 1);
    box.style.height = `${rows * rowH + 4}px`;
    $('flame-total').textContent = `${fmt(rootValue, unit)} ${d.sampleTypes[state.type]!.type}${state.zoom !== 0 ? ` under ${display(d.nodes.frame[state.zoom]!)}` : ''}`;
  }

  function hue(name: string): number {
    let h = 0;
    for (let i = 0; i < name.length; i++) h = (h * 31 + name.charCodeAt(i)) >>> 0;
    return h % 50;
  }

  function drawSearch(): void {
    const out = $('search-result');
    const re = searchRegex();
    if (!re) {
      out.textContent = '';
      return;
    }
    const t = state.type;
    let matched = 0;
    let total = 0;
    const hits = new Set<string>();
    d.samples.node.forEach((leaf, i) => {
      if (!passes(i)) return;
      const val = d.samples.values[t]![i]!;
      total += Math.abs(val);
      for (let x = leaf; x > 0; x = d.nodes.parent[x]!) {
        const name = display(d.nodes.frame[x]!); // as drawn on the bar: JavaScript frames with file:line
        if (re.test(name)) {
          matched += val;
          hits.add(name);
          break;
        }
      }
    });
    const unit = d.sampleTypes[t]!.unit;
    out.textContent = `${searchError ? `${searchError}; ` : ''}matched ${hits.size} function${hits.size === 1 ? '' : 's'}: ${fmt(matched, unit)} (${pct(matched, total)})`;
    out.classList.toggle('error', searchError !== '');
    out.setAttribute('data-matched', String(matched));
  }

  /** flat and cum by function name, as `top` computes them. */
  function topRows(js: boolean): { name: string; shown: string; flat: number; cum: number }[] {
    const t = state.type;
    const flat = new Map<string, number>();
    const cum = new Map<string, number>();
    const shown = new Map<string, string>();
    const seen = new Set<string>();
    d.samples.node.forEach((leaf, i) => {
      if (!passes(i)) return;
      const val = d.samples.values[t]![i]!;
      if (val === 0) return;
      seen.clear();
      let first = true;
      for (let x = leaf; x > 0; x = d.nodes.parent[x]!) {
        const f = d.nodes.frame[x]!;
        if (js && (d.frames.js[f] !== 1 || d.frames.file[f]!.startsWith('node:'))) continue;
        const key = js ? display(f) : d.frames.name[f]!;
        if (!shown.has(key)) shown.set(key, display(f));
        if (first && !js) flat.set(key, (flat.get(key) ?? 0) + val);
        first = false;
        if (!seen.has(key)) {
          seen.add(key);
          cum.set(key, (cum.get(key) ?? 0) + val);
        }
      }
    });
    return [...cum].map(([name, c]) => ({ name, shown: shown.get(name)!, flat: flat.get(name) ?? 0, cum: c }));
  }

  function totalOf(): number {
    let total = 0;
    d.samples.node.forEach((_, i) => {
      if (passes(i)) total += Math.abs(d.samples.values[state.type]![i]!);
    });
    return total;
  }

  function drawTop(): void {
    const rows = topRows(false);
    const key = state.sort;
    rows.sort((a, b) => (key === 'name' ? (a.name < b.name ? -1 : 1) : Math.abs(b[key]) - Math.abs(a[key]) || Math.abs(b.cum) - Math.abs(a.cum) || (a.name < b.name ? -1 : 1)));
    for (const th of Array.from(document.querySelectorAll<HTMLElement>('#top th[data-sort]'))) {
      if (th.dataset.sort === key) th.setAttribute('aria-sort', key === 'name' ? 'ascending' : 'descending');
      else th.removeAttribute('aria-sort');
    }
    fillTable('top', rows.slice(0, 300), true);
  }

  function drawJs(): void {
    const rows = topRows(true).sort((a, b) => b.cum - a.cum || (a.name < b.name ? -1 : 1));
    $('js-section').hidden = rows.length === 0;
    fillTable('js', rows.slice(0, 100), false);
  }

  function fillTable(id: string, rows: { shown: string; flat: number; cum: number }[], withFlat: boolean): void {
    const body = $(id).querySelector('tbody')!;
    body.textContent = '';
    const unit = d.sampleTypes[state.type]!.unit;
    const total = totalOf();
    for (const r of rows) {
      const tr = el('tr');
      if (withFlat) tr.append(el('td', { class: 'num' }, fmt(r.flat, unit)), el('td', { class: 'num' }, pct(r.flat, total)));
      tr.append(el('td', { class: 'num' }, fmt(r.cum, unit)), el('td', { class: 'num' }, pct(r.cum, total)), el('td', { class: 'name' }, r.shown));
      body.append(tr);
    }
  }

  /** "value" ticks for an axis from 0 to max: 0 and up to 4 round steps. */
  const ticks = (max: number, bytes: boolean): number[] => {
    if (!(max > 0)) return [0];
    const base = bytes ? 1024 ** Math.max(0, Math.floor(Math.log(max) / Math.log(1024))) : 1;
    const raw = max / base / 4;
    const mag = 10 ** Math.floor(Math.log10(raw));
    const step = ([1, 2, 2.5, 5, 10].map((m) => m * mag).find((m) => m >= raw) ?? 10 * mag) * base;
    const out: number[] = [];
    for (let v = 0; v <= max * 1.0001; v += step) out.push(v);
    return out;
  };
  const svgNs = 'http://www.w3.org/2000/svg';
  const svg = (tag: string, attrs: Record<string, string | number>, text?: string): SVGElement => {
    const e = document.createElementNS(svgNs, tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
    if (text !== undefined) e.textContent = text;
    return e;
  };
  const via = (names: string[], program: string | undefined): string => {
    if (names.length === 0) return '';
    const keep = new Set<number>([0, names.length - 1]);
    const p = program !== undefined ? names.indexOf(program) : -1;
    if (p >= 0) keep.add(p);
    const parts: string[] = [];
    let last = -1;
    for (const i of [...keep].sort((a, b) => a - b)) {
      if (i > last + 1) parts.push('…');
      parts.push(names[i]!);
      last = i;
    }
    return `via ${parts.join(' ← ')}${keep.size < names.length ? ` (${names.length} callers)` : ''}`;
  };

  /** The in-use total over time with its axes: time in seconds, the total in the sample type's unit; profiles left out of the fit drawn apart. */
  function growthChart(g: Data['growth'][number]): SVGElement {
    const w = 640;
    const h = 200;
    const m = { left: 72, right: 16, top: 12, bottom: 40 };
    const maxT = Math.max(...g.times, ...g.others.map((o) => o.time), 1);
    const maxV = Math.max(...g.totals, ...g.others.map((o) => o.total), 1);
    const x = (t: number) => m.left + (t / maxT) * (w - m.left - m.right);
    const y = (v: number) => h - m.bottom - (v / maxV) * (h - m.top - m.bottom);
    const root = svg('svg', { width: w, height: h, role: 'img', 'aria-label': `${g.type} over time`, class: 'growth-chart' });
    const xAxis = svg('g', { class: 'axis x-axis' });
    xAxis.append(svg('line', { x1: m.left, y1: h - m.bottom, x2: w - m.right, y2: h - m.bottom, stroke: '#444' }));
    for (const t of ticks(maxT / 1000, false)) {
      xAxis.append(svg('line', { x1: x(t * 1000), y1: h - m.bottom, x2: x(t * 1000), y2: h - m.bottom + 4, stroke: '#444' }));
      xAxis.append(svg('text', { x: x(t * 1000), y: h - m.bottom + 16, 'text-anchor': 'middle', class: 'tick' }, `${Number(t.toPrecision(6))}`));
    }
    xAxis.append(svg('text', { x: (m.left + w - m.right) / 2, y: h - 4, 'text-anchor': 'middle', class: 'axis-label' }, 'seconds since the first profile'));
    const yAxis = svg('g', { class: 'axis y-axis' });
    yAxis.append(svg('line', { x1: m.left, y1: m.top, x2: m.left, y2: h - m.bottom, stroke: '#444' }));
    for (const v of ticks(maxV, g.unit === 'bytes')) {
      yAxis.append(svg('line', { x1: m.left - 4, y1: y(v), x2: w - m.right, y2: y(v), stroke: v === 0 ? '#444' : '#eee' }));
      yAxis.append(svg('text', { x: m.left - 6, y: y(v) + 4, 'text-anchor': 'end', class: 'tick' }, fmt(v, g.unit)));
    }
    yAxis.append(svg('text', { x: 12, y: (m.top + h - m.bottom) / 2, 'text-anchor': 'middle', transform: `rotate(-90 12 ${(m.top + h - m.bottom) / 2})`, class: 'axis-label' }, `${g.type} (${g.unit})`));
    root.append(yAxis, xAxis);
    root.append(svg('polyline', { fill: 'none', stroke: '#c0392b', 'stroke-width': 2, points: g.times.map((t, i) => `${x(t).toFixed(1)},${y(g.totals[i]!).toFixed(1)}`).join(' ') }));
    g.times.forEach((t, i) => {
      const c = svg('circle', { cx: x(t).toFixed(1), cy: y(g.totals[i]!).toFixed(1), r: 3, fill: '#c0392b', class: 'point' });
      c.append(svg('title', {}, `${(t / 1000).toFixed(1)} s: ${fmt(g.totals[i]!, g.unit)}`));
      root.append(c);
    });
    for (const o of g.others) {
      const c = svg('circle', { cx: x(o.time).toFixed(1), cy: y(o.total).toFixed(1), r: 5, fill: '#fff', stroke: '#2c3e50', 'stroke-width': 2, class: `other ${o.kind}` });
      c.append(svg('title', {}, `${o.kind} profile ${o.source}, not fitted: ${fmt(o.total, g.unit)}`));
      root.append(c, svg('text', { x: x(o.time) - 6, y: y(o.total) - 8, 'text-anchor': 'end', class: 'tick' }, `${o.kind}: ${fmt(o.total, g.unit)}`));
    }
    return root;
  }

  function drawGrowth(): void {
    const section = $('growth-section');
    const box = $('growth-processes');
    box.textContent = '';
    $('growth-unfitted').textContent = data.unfitted.length > 0 ? `Not fitted: ${data.unfitted.join('; ')}` : '';
    if (data.growth.length === 0) {
      section.hidden = data.unfitted.length === 0;
      return;
    }
    section.hidden = false;
    data.growth.forEach((g, gi) => {
      const id = (name: string) => (gi === 0 ? name : `${name}-${gi + 1}`);
      const part = el('div', { class: 'growth-process', 'data-process': g.label });
      part.append(el('h3', {}, `${g.label}${g.command ? ` (${g.command})` : ''}`));
      const chart = el('div', { id: id('growth-chart') });
      chart.append(growthChart(g));
      const maxT = Math.max(...g.times, 1);
      const others = g.others.map((o) => `; ${o.kind} profile ${fmt(o.total, g.unit)} at ${(o.time / 1000).toFixed(1)} s, not fitted${o.kind === 'exit' ? ' (taken after a full garbage collection; growth --include-exit fits it)' : ''}`).join('');
      const caption = el('p', { class: 'note', id: id('growth-caption') }, `${g.type}: ${fmt(g.totals[0]!, g.unit)} → ${fmt(g.totals[g.totals.length - 1]!, g.unit)} over ${(maxT / 1000).toFixed(1)} s (${g.times.length} profiles)${others}`);
      const table = el('table', { class: 'rows', id: id('growth') });
      table.innerHTML = '<thead><tr><th>slope</th><th>95% interval</th><th></th><th>over time</th><th>where it grows (deepest function carrying the slope, via its callers)</th></tr></thead><tbody></tbody>';
      const body = table.querySelector('tbody')!;
      for (const f of g.functions) {
        const max = Math.max(...f.series.map(Math.abs), 1);
        const sw = 120;
        const sh = 24;
        const pts = f.series.map((v, i) => `${((i / Math.max(1, f.series.length - 1)) * (sw - 4) + 2).toFixed(1)},${(sh - 2 - (v / max) * (sh - 4)).toFixed(1)}`).join(' ');
        const tr = el('tr');
        const spark = el('td');
        spark.innerHTML = `<svg width="${sw}" height="${sh}"><polyline fill="none" stroke="#2c3e50" stroke-width="1.5" points="${pts}"/></svg>`;
        const name = el('td', { class: 'name' });
        name.append(el('div', {}, f.name));
        const callers = via(f.via, f.program);
        if (callers) name.append(el('div', { class: 'via', title: f.via.join('\n') }, callers));
        tr.append(
          el('td', { class: 'num' }, `${fmt(f.perSecond, g.unit)}/s`),
          el('td', { class: 'num' }, `${fmt(f.low, g.unit)}/s … ${fmt(f.high, g.unit)}/s`),
          el('td', {}, f.significant ? 'grows' : ''),
          spark,
          name,
        );
        body.append(tr);
      }
      part.append(chart, caption, table);
      box.append(part);
    });
  }

  // ---- events ----
  $('flame').addEventListener('click', (e) => {
    const t = (e.target as HTMLElement).closest<HTMLElement>('.fg');
    if (!t) return;
    state.zoom = Number(t.dataset.node);
    drawFlame();
  });
  $('reset-zoom').addEventListener('click', () => {
    state.zoom = 0;
    drawFlame();
  });
  const tip = $('tooltip');
  $('flame').addEventListener('mousemove', (e) => {
    const t = (e.target as HTMLElement).closest<HTMLElement>('.fg');
    if (!t) {
      tip.hidden = true;
      return;
    }
    const node = Number(t.dataset.node);
    const f = d.nodes.frame[node]!;
    const lines = [node === 0 ? 'all' : d.frames.name[f]!];
    if (node !== 0 && d.frames.file[f]) lines.push(`${d.frames.file[f]}${d.frames.line[f] ? `:${d.frames.line[f]}` : ''}`);
    d.sampleTypes.forEach((st, i) => lines.push(`${st.type}: ${fmt(values[i]![node]!, st.unit)}`));
    lines.push(`share: ${pct(values[state.type]![node]!, values[state.type]![0]!)} of ${d.sampleTypes[state.type]!.type}`);
    tip.textContent = lines.join('\n');
    tip.hidden = false;
    tip.style.left = `${e.pageX + 12}px`;
    tip.style.top = `${e.pageY + 12}px`;
  });
  $('flame').addEventListener('mouseleave', () => {
    tip.hidden = true;
  });
  $<HTMLInputElement>('search').addEventListener('input', (e) => {
    state.search = (e.target as HTMLInputElement).value.trim();
    drawFlame();
    drawSearch();
  });
  $<HTMLSelectElement>('type').addEventListener('change', (e) => {
    state.type = Number((e.target as HTMLSelectElement).value);
    draw();
  });
  $<HTMLSelectElement>('profile').addEventListener('change', (e) => {
    state.profile = Number((e.target as HTMLSelectElement).value);
    load(state.profile);
    draw();
  });
  for (const th of Array.from(document.querySelectorAll<HTMLElement>('#top th[data-sort]'))) {
    th.addEventListener('click', () => {
      state.sort = th.dataset.sort as typeof state.sort;
      drawTop();
    });
  }
  window.addEventListener('resize', () => drawFlame());

  const profiles = $<HTMLSelectElement>('profile');
  data.profiles.forEach((p, i) => {
    const o = el('option', { value: String(i) }, `${i + 1}. ${p.source}${p.pid !== undefined ? ` (pid ${p.pid}${p.kind !== 'periodic' ? `, ${p.kind} profile` : ''})` : ''}`) as HTMLOptionElement;
    if (i === state.profile) o.selected = true;
    profiles.append(o);
  });
  $('profile-picker').hidden = data.profiles.length < 2;
  load(state.profile);
  performance.mark('report-loaded');
  draw();
  drawGrowth();
  performance.mark('report-drawn');
  (window as unknown as { __report: unknown }).__report = { ready: true, readyMs: performance.now() };
}
