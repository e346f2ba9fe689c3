"""The HTML/CSS/JS of report.html (self-contained; `__DATA__` is replaced by the JSON data).

The page draws with plain canvas, no external resources. `#t=<index>` opens it at a tick;
`#selftest` walks the slider over every tick and puts the outcome in the title (the headless
browser test reads it)."""

PAGE = r"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>blockplan replay</title>
<style>
body{font-family:system-ui,sans-serif;margin:16px;background:#fafafa;color:#222}
h1{font-size:20px;margin:0 0 8px} h2{font-size:15px;margin:12px 0 6px}
.row{display:flex;gap:16px;flex-wrap:wrap;align-items:flex-start}
.card{background:#fff;border:1px solid #ddd;border-radius:6px;padding:10px}
#frames img{width:240px;image-rendering:pixelated;margin:2px;border:1px solid #ccc}
#frames figure{display:inline-block;margin:0 4px;text-align:center;font-size:11px}
.missing{width:240px;height:60px;display:inline-flex;align-items:center;justify-content:center;
 background:#eee;color:#a00;border:1px dashed #a00}
#slider{width:100%} .fb{color:#b00;font-weight:bold} .ok{color:#070;font-weight:bold}
table{border-collapse:collapse;font-size:13px;max-width:100%}
td{padding:2px 8px;border-bottom:1px solid #eee;vertical-align:top;overflow-wrap:anywhere}
.warn{background:#fff3e0;border:1px solid #ef6c00;border-radius:6px;padding:8px;margin:0 0 10px}
.legend span{display:inline-block;margin-right:10px;font-size:12px}
.sw{display:inline-block;width:14px;height:3px;vertical-align:middle;margin-right:4px}
</style></head><body>
<h1>blockplan replay — <span id="bag"></span></h1>
<div id="banner"></div>
<div class="card"><div id="summary"></div></div>
<div class="card" style="margin-top:10px">
 <input type="range" id="slider" min="0" max="0" value="0">
 <div id="status"></div>
</div>
<div class="row" style="margin-top:10px">
 <div class="card"><h2>Bird's-eye (ego frame at the plan's t0; x forward = up)</h2>
  <canvas id="bev" width="440" height="440"></canvas>
  <div><label><input type="checkbox" id="zoom"> lateral ×5</label></div>
  <div class="legend"><span><i class="sw" style="background:#1565c0"></i>plan</span>
  <span><i class="sw" style="background:#90a4ae"></i>rollouts</span>
  <span><i class="sw" style="background:#2e7d32"></i>recorded future</span>
  <span><i class="sw" style="background:#ef6c00"></i>published (stitched)</span></div></div>
 <div class="card" style="max-width:520px"><h2>Reasoning</h2><div id="reasoning"></div>
  <h2>Latency</h2><canvas id="lat" width="500" height="170"></canvas></div>
</div>
<div class="card" style="margin-top:10px"><h2>Cameras (newest frame in the window)</h2>
 <div id="frames"></div></div>
<div class="card" style="margin-top:10px"><h2>Summary plots</h2><div id="plots"></div></div>
<script id="data" type="application/json">__DATA__</script>
<script>
"use strict";
const D = JSON.parse(document.getElementById("data").textContent);
const $ = (id) => document.getElementById(id);
const slider = $("slider");
function esc(s){return String(s).replace(/[&<>"]/g,c=>({"&":"&amp;","<":"&lt;",">":"&gt;","\"":"&quot;"}[c]));}

// "a 1, b 2" for a {name: count} object (never raw JSON on the page).
function counts(o){
  const e = Object.entries(o || {});
  return e.length ? e.map(kv=>esc(kv[0])+" "+esc(kv[1])).join(", ") : "none";
}
function pair(s){ return (s && s.p50 !== null && s.p50 !== undefined) ? s.p50+" / "+s.p99 : "n/a"; }

function summary(){
  $("bag").textContent = D.meta.bag;
  const m = D.metrics, rows = [], notes = [];
  if (D.meta.interrupted) notes.push("Interrupted (Ctrl-C) after "+esc(m.interrupted_after_s)+" s of the bag: this report covers the ticks done only.");
  if (D.meta.no_ticks) notes.push("No control tick ran: "+esc(D.meta.no_ticks));
  if (D.meta.weights === "unverified") notes.push("The model's weights are unverified: its folder has no manifest.json.");
  $("banner").innerHTML = notes.map(n=>'<div class="warn">'+n+"</div>").join("");
  if (D.meta.model) rows.push("<td>model / weights</td><td>"+esc(D.meta.model)+" / "+esc(D.meta.weights)+"</td>");
  for (const k of ["ticks","plans","fallbacks","deadline_misses","invalid_inputs"]) {
    if (k in m) rows.push("<td>"+k+"</td><td>"+esc(m[k])+"</td>");
  }
  const units = {ade_3s:"ADE@3s (m)", ade_5s:"ADE@5s (m)", l2_1s:"L2@1s (m)", l2_2s:"L2@2s (m)", l2_3s:"L2@3s (m)"};
  for (const k in units) if (k in m) rows.push("<td>"+units[k]+"</td><td>"+esc(m[k])+"</td>");
  if ("evaluated_plans" in m) rows.push("<td>plans scored / not scored</td><td>"+m.evaluated_plans+" / "+counts(m.unscored_plans)+"</td>");
  rows.push("<td>latency p50 / p99 (ms)</td><td>"+pair(m.latency_ms)+"</td>");
  rows.push("<td>timing / rate</td><td>"+esc(D.meta.timing)+" / "+D.meta.rate_hz+" Hz</td>");
  const st = m.streaming;
  if (st && st.window_shared_fraction !== null) {
    rows.push("<td>window frames shared / new</td><td>"+st.window_frames_shared+" / "+st.window_frames_new+"</td>");
    const pf = st.planner && st.planner.prefill;
    if (pf) {
      rows.push("<td>streamed ticks / full prefills</td><td>"+pf.streamed_ticks+" / "+pf.full_prefills+" ("+counts(pf.full_prefill_reasons)+")</td>");
      rows.push("<td>frames reused / computed</td><td>"+pf.frames_reused+" / "+pf.frames_computed+"</td>");
    }
    if (st.encode_prefill_ms && st.encode_prefill_ms.p50 !== null) rows.push("<td>encode + prefill p50 / p99 (ms)</td><td>"+pair(st.encode_prefill_ms)+"</td>");
  }
  $("summary").innerHTML = "<table><tr>"+rows.join("</tr><tr>")+"</tr></table>";
  $("plots").innerHTML = D.plots.map(p=>'<img alt="'+esc(p.name)+'" src="'+p.src+'">').join(" ");
}

function bev(tick){
  const c = $("bev"), g = c.getContext("2d");
  g.clearRect(0,0,c.width,c.height);
  const plan = tick.src >= 0 ? D.plans[tick.src] : null;
  const lines = [];
  if (plan){
    for (const r of plan.rollouts) lines.push({p:r, col:"rgba(96,125,139,0.55)", w:1});
    lines.push({p:plan.xy, col:"#1565c0", w:3});
  }
  lines.push({p:tick.pub, col:"#ef6c00", w:2});
  if (plan && plan.truth) lines.push({p:plan.truth, col:"#2e7d32", w:2.5, dash:[6,4]});
  // Forward (x) fills the height with the ego near the bottom; lateral (y) may be zoomed.
  let xmin = -2, xmax = 10, ymax = 3;
  for (const l of lines) for (const q of l.p){
    xmin = Math.min(xmin, q[0]); xmax = Math.max(xmax, q[0]); ymax = Math.max(ymax, Math.abs(q[1]));
  }
  const zoom = $("zoom").checked ? 5 : 1;
  const pad = 0.08*(xmax - xmin);
  const s = (c.height - 20)/(xmax - xmin + 2*pad);
  const sy = Math.min(s*zoom, (c.width/2 - 10)/ymax);
  const X = (q)=>c.width/2 - q[1]*sy, Y = (q)=>c.height - 10 - (q[0] - xmin + pad)*s;
  g.strokeStyle="#eee"; g.lineWidth=1;
  const step = xmax - xmin > 120 ? 20 : xmax - xmin > 50 ? 10 : 5;
  for (let v = Math.floor(xmin/step)*step; v <= xmax + pad; v += step){
    g.beginPath(); g.moveTo(0,Y([v,0])); g.lineTo(c.width,Y([v,0])); g.stroke();
  }
  g.strokeStyle="#ddd"; g.beginPath(); g.moveTo(X([0,0]),0); g.lineTo(X([0,0]),c.height); g.stroke();
  for (const l of lines){
    g.strokeStyle=l.col; g.lineWidth=l.w; g.setLineDash(l.dash||[]);
    g.beginPath(); g.moveTo(X([0,0]),Y([0,0]));
    for (const q of l.p) g.lineTo(X(q),Y(q));
    g.stroke();
  }
  g.setLineDash([]); g.fillStyle="#333";
  g.fillRect(X([0,0.9]), Y([2.2,0]), 1.8*sy, 4.4*s);
  g.fillText(step+" m between lines"+(sy > s*1.01 ? "; lateral x"+(sy/s).toFixed(1) : ""), 6, 12);
}

function latency(tick){
  const c = $("lat"), g = c.getContext("2d");
  g.clearRect(0,0,c.width,c.height);
  const t0 = D.ticks.length ? D.ticks[0].t : 0, t1 = D.ticks.length ? D.ticks[D.ticks.length-1].t : 1;
  const pts = D.latency;
  let ymax = 1; for (const p of pts) ymax = Math.max(ymax, p[1]*1.15);
  const X = (t)=>30 + (c.width-40)*(t-t0)/Math.max(t1-t0,1e-9), Y = (v)=>c.height-20 - (c.height-30)*v/ymax;
  g.strokeStyle="#999"; g.beginPath(); g.moveTo(30,10); g.lineTo(30,c.height-20); g.lineTo(c.width-10,c.height-20); g.stroke();
  g.fillStyle="#555"; g.fillText(ymax.toFixed(0)+" ms",2,12); g.fillText("0",18,c.height-20);
  g.strokeStyle="#1565c0"; g.beginPath();
  pts.forEach((p,i)=>{ if(i) g.lineTo(X(p[0]),Y(p[1])); else g.moveTo(X(p[0]),Y(p[1])); }); g.stroke();
  g.fillStyle="#c62828";
  for (const t of D.fallback_times) g.fillRect(X(t)-1, c.height-18, 2, 6);
  g.strokeStyle="#ef6c00"; g.beginPath(); g.moveTo(X(tick.t),10); g.lineTo(X(tick.t),c.height-20); g.stroke();
  g.fillStyle="#555"; g.fillText("inference latency per plan; red: fallback ticks", 36, c.height-4);
}

function reasoning(tick){
  const plan = tick.src >= 0 ? D.plans[tick.src] : null;
  if (!plan){ $("reasoning").innerHTML = "<i>no plan behind this tick</i>"; return; }
  const r = plan.reasoning;
  const objs = Object.entries(r.critical_objects).filter(e=>e[1]).map(e=>e[0]);
  $("reasoning").innerHTML = "<table>"+
    "<tr><td>plan t0</td><td>"+plan.t.toFixed(2)+" s</td></tr>"+
    "<tr><td>critical objects</td><td>"+(objs.length? esc(objs.join(", ")) : "none")+"</td></tr>"+
    "<tr><td>explanation</td><td>"+esc(r.explanation)+"</td></tr>"+
    "<tr><td>meta behaviour</td><td>"+esc(r.meta_behavior.longitudinal)+" / "+esc(r.meta_behavior.lateral)+"</td></tr>"+
    "<tr><td>rollouts</td><td>"+r.num_rollouts+"</td></tr>"+
    "<tr><td>latency</td><td>"+r.latency_ms+" ms"+(r.is_degraded? " (degraded cameras)":"")+"</td></tr>"+
    "<tr><td>timings (ms)</td><td>"+Object.entries(r.timings_ms || {}).map(kv=>esc(kv[0])+" "+Number(kv[1]).toFixed(1)).join(" &middot; ")+"</td></tr></table>";
}

function frames(tick){
  $("frames").innerHTML = D.cameras.map((cam,i)=>{
    const key = tick.frames[i];
    const body = key ? '<img alt="'+esc(cam)+'" src="'+D.images[key]+'">' : '<div class="missing">stale / missing</div>';
    return "<figure>"+body+"<figcaption>"+esc(cam)+"</figcaption></figure>";
  }).join("");
}

function show(i){
  const tick = D.ticks[i];
  if (!tick) return;
  $("status").innerHTML = "tick "+i+" / "+(D.ticks.length-1)+" &middot; t = "+tick.t.toFixed(2)+" s &middot; "+
    (tick.fb ? '<span class="fb">FALLBACK</span> '+esc(tick.reason) : '<span class="ok">plan</span>');
  bev(tick); latency(tick); reasoning(tick); frames(tick);
}

slider.max = Math.max(0, D.ticks.length-1);
slider.addEventListener("input", ()=>show(Number(slider.value)));
$("zoom").addEventListener("change", ()=>show(Number(slider.value)));
summary();
const m = location.hash.match(/^#t=(\d+)(z?)$/);
slider.value = m ? m[1] : D.start;
$("zoom").checked = Boolean(m && m[2]);
show(Number(slider.value));
if (location.hash === "#selftest"){
  for (let i = 0; i < D.ticks.length; i++){ slider.value = i; slider.dispatchEvent(new Event("input")); }
  $("zoom").checked = true; $("zoom").dispatchEvent(new Event("change"));
  document.title = "selftest ok " + D.ticks.length;
  console.log(document.title);
}
</script></body></html>
"""
