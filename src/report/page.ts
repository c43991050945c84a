/**
 * The report as one HTML file: styles, script (client.ts, as text) and data inline, and a
 * Content-Security-Policy that allows no request of any kind, so it opens from file:// and
 * cannot reach the network even by mistake. Why a renderer of our own rather than a bundled
 * flame-graph library: docs/report.md.
 */
import { gzipSync } from 'node:zlib';

import { reportClient } from './client.js';
import type { ReportData } from './data.js';

const STYLE = `
body{font:13px/1.4 system-ui,sans-serif;margin:0;color:#222;background:#fff}
header,main{padding:8px 16px}
h1{font-size:18px;margin:8px 0}
h2{font-size:15px;margin:18px 0 6px}
#controls{display:flex;flex-wrap:wrap;gap:12px;align-items:flex-start;margin:6px 0}
#controls label{white-space:nowrap}
fieldset.filter{border:1px solid #ccc;padding:2px 8px;margin:0}
fieldset.filter label{margin-right:8px}
#header th{text-align:left;font-weight:600;padding-right:12px;vertical-align:top;white-space:nowrap}
#header td{word-break:break-all}
#flame{position:relative;width:100%;overflow:hidden;border:1px solid #ddd;font:11px/18px ui-monospace,monospace}
.fg{position:absolute;height:17px;overflow:hidden;white-space:nowrap;text-overflow:ellipsis;padding:0 3px;box-sizing:border-box;cursor:pointer;
  background:hsl(calc(10 + var(--h)),80%,62%);border-radius:2px}
.fg.js{background:hsl(calc(195 + var(--h)),60%,62%)}
.fg.ancestor{opacity:.55}
.fg.match{background:#e040fb;color:#fff;font-weight:600}
.fg:hover{outline:1px solid #000}
#tooltip{position:absolute;background:#fffbe6;border:1px solid #999;padding:4px 8px;white-space:pre;pointer-events:none;z-index:10;font:12px ui-monospace,monospace}
table.rows{border-collapse:collapse}
table.rows td,table.rows th{padding:1px 8px;border-bottom:1px solid #eee}
table.rows th{text-align:right;background:#f6f6f6}
table.rows th[data-sort]{cursor:pointer;text-decoration:underline dotted}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td.name{font-family:ui-monospace,monospace;word-break:break-all}
#search{width:260px}
#search-result{margin-left:8px;font-weight:600}
#search-result.error{color:#b00020}
table.rows th[aria-sort]{background:#e4ecf7}
td.name .via{color:#555;font-size:11px}
svg.growth-chart{font:11px system-ui,sans-serif;overflow:visible}
svg.growth-chart .axis-label{fill:#333}
svg.growth-chart .tick{fill:#555}
h3{font-size:13px;margin:12px 0 4px}
.note{color:#666}
`;

/** The page body's markup (ids are the script's). */
const BODY = `
<header>
<h1 id="title"></h1>
<table id="header"></table>
</header>
<main>
<div id="controls">
<label id="profile-picker">profile <select id="profile"></select></label>
<label>sample type <select id="type"></select></label>
<label>search <input id="search" type="search" placeholder="function, file:line or regular expression"></label><span id="search-result"></span>
<button id="reset-zoom" type="button">reset zoom</button>
<div id="filters"></div>
</div>
<h2>Flame graph <span class="note" id="flame-total"></span></h2>
<p class="note">Each bar is a function in the call stacks; its width is the share of the figure beneath it. Click to zoom, hover for details; JavaScript frames are blue.</p>
<div id="flame"></div>
<div id="tooltip" hidden></div>
<section id="js-section">
<h2>JavaScript functions with memory beneath them (cumulative)</h2>
<table class="rows" id="js"><thead><tr><th>cum</th><th>cum%</th><th>function</th></tr></thead><tbody></tbody></table>
</section>
<h2>Top functions</h2>
<table class="rows" id="top"><thead><tr><th data-sort="flat">flat</th><th>flat%</th><th data-sort="cum">cum</th><th>cum%</th><th data-sort="name">function</th></tr></thead><tbody></tbody></table>
<section id="growth-section" hidden>
<h2>Growth over the profiles</h2>
<p class="note">One analysis per process (profiles grouped by their recorded pid). Each row is where memory grows: the deepest function that carries a slope, via the callers with the same slope, with the least-squares slope across the profiles in time order and an interval that accounts for sampling noise (as <code>mimalloc-pprof growth</code>); "grows" when the whole interval is above 0. The exit profile (taken after a full garbage collection) is drawn apart and not fitted.</p>
<div id="growth-processes"></div>
<p class="note" id="growth-unfitted"></p>
</section>
</main>
`;

function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

/**
 * The data as gzipped JSON in base64 (the browser inflates it with DecompressionStream): a
 * profile's stacks repeat their frames, so this is 5-10 times smaller than the JSON, and
 * base64 cannot end a <script> element.
 */
function packedData(value: unknown): string {
  return gzipSync(JSON.stringify(value), { level: 9 }).toString('base64');
}

/** The report page for `data` (see the file comment). */
/** The data as the page reads it: parents stored as distances (see ProfileData.nodes). */
function packed(data: ReportData): ReportData {
  return {
    ...data,
    profiles: data.profiles.map((p) => ({ ...p, nodes: { parent: p.nodes.parent.map((q, i) => (i === 0 ? 0 : i - q)), frame: p.nodes.frame } })),
  };
}

export function renderReport(data: ReportData): string {
  const csp = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'";
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="${csp}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="${escapeHtml(data.generator)}">
<title>${escapeHtml(`heap profile: ${data.title}`)}</title>
<style>${STYLE}</style>
</head>
<body>
${BODY.replace('<h1 id="title"></h1>', `<h1 id="title">${escapeHtml(`Heap profile: ${data.title}`)}</h1>`)}
<script id="report-data" type="application/octet-stream" data-encoding="gzip+base64">${packedData(packed(data))}</script>
<script>(${reportClient.toString()})();</script>
</body>
</html>
`;
}
