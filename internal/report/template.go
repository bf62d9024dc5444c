package report

// pageTemplate is the page. It links to nothing outside itself: no
// scripts, fonts, images or style sheets (the tests check).
const pageTemplate = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}}</title>
<style>
:root { --fg: #1d2329; --muted: #5b6670; --line: #d8dde2; --bg: #fff; --panel: #f6f8fa;
  --accepted: #3c9d5d; --dropped: #d64534; --offered: #1d2329; --shadow: #e08600; --marked: #7b4fd0;
  --unmatched: #2f74c0; --malformed: #b03a73; --nonip: #7a858f; }
* { box-sizing: border-box; }
body { margin: 0 auto; max-width: 1000px; padding: 16px 20px 40px; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--fg); background: var(--bg); }
h1 { font-size: 22px; margin: 8px 0 2px; }
h2 { font-size: 18px; margin: 28px 0 8px; padding-bottom: 4px; border-bottom: 1px solid var(--line); }
h3 { font-size: 15px; margin: 0 0 2px; }
.sub, .muted, figcaption { color: var(--muted); }
nav a { margin-right: 12px; }
a { color: #2f62a8; text-decoration: none; }
a:hover { text-decoration: underline; }
.err { background: #fdecea; border: 1px solid #f3b7b0; padding: 8px 12px; border-radius: 4px; }
table { border-collapse: collapse; margin: 6px 0; font-variant-numeric: tabular-nums; }
th, td { padding: 3px 10px 3px 0; text-align: left; vertical-align: top; }
th { font-weight: 600; border-bottom: 1px solid var(--line); }
td.n, th.n { text-align: right; padding-left: 12px; }
table.kv th { border: 0; font-weight: normal; color: var(--muted); padding-right: 16px; }
table.list tr:nth-child(even) td { background: var(--panel); }
.drop { color: var(--dropped); font-weight: 600; }
.shadowed { color: var(--shadow); font-weight: 600; } .markedn { color: var(--marked); font-weight: 600; }
pre { background: var(--panel); padding: 10px 12px; border-radius: 4px; overflow-x: auto; font: 12.5px/1.4 ui-monospace, "DejaVu Sans Mono", monospace; }
code { font: 12.5px ui-monospace, "DejaVu Sans Mono", monospace; }
figure.chart { margin: 4px 0 8px; }
figure.chart svg { width: 100%; height: auto; display: block; }
.legend { font-size: 12.5px; margin: 2px 0 2px; }
.key { margin-right: 14px; white-space: nowrap; }
.sw { display: inline-block; width: 12px; height: 10px; margin-right: 4px; vertical-align: -1px; border-radius: 2px; }
.sw.ln { height: 3px; vertical-align: 3px; }
.sw.accepted { background: var(--accepted); } .sw.dropped { background: var(--dropped); }
.sw.offered { background: var(--offered); } .sw.shadow { background: var(--shadow); } .sw.marked { background: var(--marked); }
.sw.unmatched { background: var(--unmatched); } .sw.malformed { background: var(--malformed); } .sw.nonip { background: var(--nonip); }
svg text { font-size: 11px; fill: var(--muted); }
svg .ylab text { text-anchor: end; }
svg .xlab text { text-anchor: middle; }
svg .grid line { stroke: var(--line); stroke-width: 1; }
svg .axis { stroke: #9aa4ad; stroke-width: 1; fill: none; }
svg .area { stroke: none; }
svg .area.accepted { fill: var(--accepted); fill-opacity: 0.55; }
svg .area.dropped { fill: var(--dropped); fill-opacity: 0.7; }
svg .line { fill: none; stroke-width: 1.5; stroke-linejoin: round; }
svg .line.offered { stroke: var(--offered); stroke-width: 1.2; }
svg .line.shadow { stroke: var(--shadow); stroke-dasharray: 5 3; stroke-width: 2; }
svg .line.marked { stroke: var(--marked); stroke-dasharray: 5 3; stroke-width: 2; }
svg .line.unmatched { stroke: var(--unmatched); } svg .line.malformed { stroke: var(--malformed); } svg .line.nonip { stroke: var(--nonip); stroke-dasharray: 2 2; }
svg .hover rect { fill: transparent; }
svg .hover rect:hover { fill: rgba(29, 35, 41, 0.08); }
svg .empty { font-size: 13px; text-anchor: middle; }
.stats { display: flex; flex-wrap: wrap; gap: 8px; margin: 8px 0; }
.stat { background: var(--panel); border-radius: 4px; padding: 6px 12px; min-width: 84px; }
.stat .v { font-size: 17px; font-weight: 600; font-variant-numeric: tabular-nums; }
.stat .k { font-size: 12px; color: var(--muted); }
.grid2 { margin-top: 16px;  display: grid; grid-template-columns: repeat(auto-fill, minmax(460px, 1fr)); gap: 18px 24px; }
.card { border: 1px solid var(--line); border-radius: 6px; padding: 10px 12px; }
.card table.kv { font-size: 13px; }
details summary { cursor: pointer; color: var(--muted); font-size: 13px; }
footer { margin-top: 32px; color: var(--muted); font-size: 12.5px; }
</style>
</head>
<body>
<header>
<h1>{{.Title}}</h1>
<p class="sub">{{with .Span}}{{.}} of capture time · {{end}}{{(index .Totals 0).V}} packets · {{len .Rules}} rule{{if ne (len .Rules) 1}}s{{end}} · buckets of {{.Width}}</p>
</header>
{{with .Err}}<p class="err">The replay stopped early: {{.}}. The report shows what was replayed before.</p>{{end}}
<nav><a href="#totals">All traffic</a><a href="#rules">Rules</a><a href="#other">Unmatched and non-IP</a><a href="#flows">Top flows</a><a href="#settings">Settings</a></nav>

<section id="totals">
<h2>All traffic</h2>
{{template "chart" .Total}}
<div class="stats">{{range .Totals}}<div class="stat"><div class="v">{{.V}}</div><div class="k">{{.K}}</div></div>{{end}}</div>
</section>

<section id="rules">
<h2>Rules</h2>
<p class="muted">In the order they are tried: the first rule that matches a packet decides.</p>
<table class="list">
<tr><th>#</th><th>rule</th><th class="n">packets</th><th class="n">accepted</th><th class="n">dropped</th><th class="n">drop %</th><th class="n">shadow-dropped</th><th class="n">marked</th><th class="n">peak offered/s</th><th class="n">flows</th><th class="n">evicted</th></tr>
{{range .Rules}}<tr><td>{{.Index}}</td><td><a href="#{{.Anchor}}">{{.Name}}</a></td><td class="n">{{num .Packets}}</td><td class="n">{{num .Accepted}}</td><td class="n{{if .Dropped}} drop{{end}}">{{num .Dropped}}</td><td class="n">{{.DropPct}}</td><td class="n">{{num .Shadow}}</td><td class="n">{{num .Marked}}</td><td class="n">{{.PeakOff}}</td><td class="n">{{num .Flows}}</td><td class="n">{{num .Evicted}}</td></tr>
{{end}}</table>{{if .TotalRows}}
<h3 id="totals">Totals</h3>
<p class="muted">A packet of a total's rules passes only if its flow's limit and the total allow it; dropped: over the total.</p>
<table class="list">
<tr><th>total</th><th class="n">packets</th><th class="n">accepted</th><th class="n">dropped</th><th class="n">drop %</th></tr>
{{range .TotalRows}}<tr><td>{{.Name}}</td><td class="n">{{num .Packets}}</td><td class="n">{{num .Accepted}}</td><td class="n{{if .Dropped}} drop{{end}}">{{num .Dropped}}</td><td class="n">{{.DropPct}}</td></tr>
{{end}}</table>{{end}}
<div class="grid2">
{{range .Rules}}<div class="card" id="{{.Anchor}}">
<h3>{{.Index}}. {{.Name}}</h3>
<div class="muted">{{.Does}}</div>
{{template "chart" .Chart}}
<table class="kv">{{range .Counts}}<tr><th>{{.K}}</th><td>{{.V}}</td></tr>{{end}}</table>
{{with .Snippet}}<details><summary>the rule as replayed</summary><pre>{{.}}</pre></details>{{end}}
</div>
{{end}}</div>
</section>

<section id="other">
<h2>Unmatched and non-IP traffic</h2>
<p class="muted">Packets no rule matched and non-IP records are accepted; malformed IP packets get the --malformed verdict ({{.Malform}}).</p>
{{template "chart" .Other}}
</section>

<section id="flows">
<h2>Top flows by drops</h2>
{{if .NoFlows}}<p class="muted">No flow is in the flow tables (no limit rule matched a packet).</p>{{else}}
<p class="muted">At most {{.Top}} flows (--top): those with the most drops, then the most shadow drops or marks (packets over a shadow or marking rule's limit, accepted: not drops), then the most packets, among the flows in the rules' tables at the end of the capture; evicted and expired flows count in the totals only.{{if not .AnyDrops}} No flow had drops.{{end}}</p>
<table class="list">
<tr><th class="n">#</th><th>rule</th><th>flow</th><th class="n">packets</th><th class="n">accepted</th><th class="n">dropped</th><th class="n">drop %</th><th class="n">shadow-dropped</th><th class="n">marked</th></tr>
{{range .Flows}}<tr><td class="n">{{.Rank}}</td><td><a href="#{{.RuleAnchor}}">{{.Rule}}</a></td><td><code>{{.Flow}}</code></td><td class="n">{{num .Packets}}</td><td class="n">{{num .Accepted}}</td><td class="n{{if .Dropped}} drop{{end}}">{{num .Dropped}}</td><td class="n">{{.DropPct}}</td><td class="n{{if .Shadow}} shadowed{{end}}">{{num .Shadow}}</td><td class="n{{if .Marked}} markedn{{end}}">{{num .Marked}}</td></tr>
{{end}}</table>{{end}}
</section>

<section id="settings">
<h2>Settings</h2>
<table class="kv">
<tr><th>command</th><td><code>{{.Command}}</code></td></tr>
<tr><th>policy</th><td>{{.Source}}</td></tr>
<tr><th>captures</th><td>{{range $i, $f := .Files}}{{if $i}}<br>{{end}}<code>{{$f.Name}}</code> ({{$f.Size}}){{end}}</td></tr>
<tr><th>capture time</th><td>{{if .Span}}{{.First}} to {{.Last}} ({{.Span}}){{else}}no packets{{end}}</td></tr>
<tr><th>buckets</th><td>{{.Buckets}} of {{.Width}} (the narrowest is {{.MinWidth}}; longer captures get wider buckets, at most {{.MaxBuckets}})</td></tr>
<tr><th>queue</th><td>{{.Queue}}</td></tr>
<tr><th>malformed packets</th><td>{{.Malform}}</td></tr>
</table>
{{with .Policy}}<p class="muted">The policy as <code>packetshaper check</code> prints it, every default filled in:</p>
<pre>{{.}}</pre>{{end}}
</section>
<footer>Written by <code>packetshaper replay --report</code>. Rates are packets per second in each bucket of capture time; the first and last buckets may be partly outside the capture. Hover over a chart for a bucket's figures.</footer>
</body>
</html>
{{define "chart"}}<figure class="chart">
<div class="legend"><span class="key muted">packets/s:</span>{{range .Series}}<span class="key"><i class="sw {{.Class}}{{if not .Area}} ln{{end}}"></i>{{.Name}} <b>{{.Total}}</b></span>{{end}}</div>
<svg viewBox="0 0 {{.W}} {{.H}}" role="img" aria-label="{{.Title}}: packets per second" data-chart="{{.ID}}">
<g class="grid">{{range .YTicks}}<line x1="{{$.X0}}" x2="{{$.X1}}" y1="{{.Pos}}" y2="{{.Pos}}"></line>{{end}}</g>
<g class="ylab">{{range .YTicks}}<text x="{{$.YLabX}}" y="{{.Pos}}" dy="0.32em">{{.Label}}</text>{{end}}</g>
<g class="xlab">{{range .XTicks}}<text x="{{.Pos}}" y="{{$.XLabY}}">{{.Label}}</text>{{end}}</g>
<text x="{{.X0}}" y="{{.H}}" dy="-3">{{.XCaption}}</text>
<g class="series">{{range .Series}}{{if .Area}}<polygon class="area {{.Class}}" data-series="{{.Name}}" points="{{.Points}}"><title>{{.Title}}</title></polygon>{{else}}<polyline class="line {{.Class}}" data-series="{{.Name}}" points="{{.Points}}"><title>{{.Title}}</title></polyline>{{end}}{{end}}</g>
<polyline class="axis" points="{{.X0}},{{.Y0}} {{.X0}},{{.Y1}} {{.X1}},{{.Y1}}"></polyline>
{{if .Empty}}<text class="empty" x="{{.XMid}}" y="{{.Y0}}" dy="40">no packets</text>{{end}}
<g class="hover">{{range .Cols}}<rect x="{{.X}}" y="{{$.Y0}}" width="{{.W}}" height="{{$.PH}}"><title>{{.Title}}</title></rect>{{end}}</g>
</svg>
</figure>{{end}}`
