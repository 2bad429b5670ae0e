"""The static parts of the HTML report: style sheet, legend and the hover script."""

from __future__ import annotations

__all__ = ["HEAD", "LEGEND", "SCRIPT"]

HEAD = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>loopwarden replay report</title>
<style>
:root{--fg:#1d2330;--muted:#5b6474;--line:#d9dde5;--bg:#f7f8fa;--warn:#e0a800;--crit:#d62728;
--abort:#7b2cbf;--ok:#2e8b57}
*{box-sizing:border-box}
body{margin:0;padding:24px 32px;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,
"DejaVu Sans",sans-serif;color:var(--fg);background:var(--bg)}
h1{margin:0 0 4px;font-size:24px}h2{font-size:18px;margin:28px 0 10px}
h3{font-size:15px;margin:0 0 6px}h3 small{color:var(--muted);font-weight:400;margin-left:6px}
.meta,.note,.sub{color:var(--muted);margin:2px 0}.note{font-style:italic}
.cards{display:flex;flex-wrap:wrap;gap:12px;margin-top:16px}
.card{background:#fff;border:1px solid var(--line);border-radius:8px;padding:10px 14px;
min-width:150px}
.card b{display:block;font-size:22px}.card span{color:var(--muted);font-size:12px}
.card.warn{border-color:var(--warn)}.card.crit{border-color:var(--crit)}
table{border-collapse:collapse;background:#fff;border:1px solid var(--line);width:100%}
th,td{padding:5px 8px;border-bottom:1px solid var(--line);text-align:left;vertical-align:top}
th{background:#eef0f4;font-weight:600;font-size:12px;white-space:nowrap}
td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td.src{font-family:ui-monospace,"DejaVu Sans Mono",monospace;font-size:12px;word-break:break-all;
min-width:14em}
td.msg{color:var(--muted);font-size:12px}
.pill{display:inline-block;border-radius:10px;padding:0 8px;font-size:11px;font-weight:700;
color:#fff;background:var(--ok)}.pill.warning{background:var(--warn)}
.pill.critical{background:var(--crit)}
.act{font-weight:700}.act.warn{color:#a87900}.act.block,.act.stop{color:var(--crit)}
.act.abort{color:var(--abort)}
article.run{background:#fff;border:1px solid var(--line);border-left:5px solid var(--ok);
border-radius:6px;padding:12px 16px;margin:0 0 16px}
article.lvl-warning{border-left-color:var(--warn)}article.lvl-critical{border-left-color:var(--crit)}
.verdict{margin:4px 0 8px;font-weight:600}
.tools{display:flex;flex-wrap:wrap;gap:4px 14px;margin:6px 0 8px;font-size:12px}
.tool small{color:var(--muted)}
.sw{display:inline-block;width:10px;height:10px;border-radius:2px;margin-right:4px;
vertical-align:-1px;background:var(--t)}
.timeline{display:flex;flex-wrap:wrap;gap:2px;margin:6px 0 10px;align-items:center}
.c{display:block;width:11px;height:22px;border-radius:2px;background:var(--t);position:relative}
.c.r{background-image:repeating-linear-gradient(135deg,rgba(0,0,0,.45) 0 2px,transparent 2px 5px)}
.c.e::before{content:"";position:absolute;left:3px;bottom:1px;width:4px;height:4px;
border-radius:2px;background:#fff}
.c.w{box-shadow:0 -4px 0 var(--warn)}
.c.b{outline:2px solid var(--crit);outline-offset:1px}
.c.s{background:#111;outline:3px solid var(--crit)}
.c.s::after{content:"■";position:absolute;left:0;right:0;top:-20px;text-align:center;
color:var(--crit);font-size:12px}
.c.a{background:var(--abort);outline:3px solid var(--abort)}
.c.x{opacity:.28}
.cp{display:block;width:3px;height:30px;background:#2a6fdb;border-radius:1px;margin:0 2px}
.t0{--t:#4e79a7}.t1{--t:#f28e2b}.t2{--t:#59a14f}.t3{--t:#76b7b2}.t4{--t:#edc948}
.t5{--t:#b07aa1}.t6{--t:#ff9da7}.t7{--t:#9c755f}.t8{--t:#bab0ac}.t9{--t:#86bcb6}
.t10{--t:#8cd17d}.t11{--t:#499894}
.legend{display:flex;flex-wrap:wrap;gap:6px 18px;font-size:12px;align-items:center;
background:#fff;border:1px solid var(--line);border-radius:6px;padding:10px 14px}
.legend .c{display:inline-block;vertical-align:middle;margin-right:6px}
.legend .cp{display:inline-block;vertical-align:middle;height:18px;margin-right:6px}
#hover{position:fixed;pointer-events:none;background:#1d2330;color:#fff;font-size:12px;
padding:3px 7px;border-radius:4px;display:none;z-index:5}
footer{margin-top:28px;color:var(--muted);font-size:12px}footer code{color:var(--fg)}
</style></head><body>
"""

LEGEND = """<section id="legend"><h2>How to read a timeline</h2><div class="legend">
<span><i class="c t0"></i>one call (colour = tool)</span>
<span><i class="c t0 r"></i>same outcome as the previous identical call</span>
<span><i class="c t0 e"></i>error outcome</span>
<span><i class="c t0 w"></i>warning appended to the result</span>
<span><i class="c t0 b"></i>blocked (not executed)</span>
<span><i class="c t0 s"></i>circuit breaker stops the run</span>
<span><i class="c t0 a"></i>post-compaction abort</span>
<span><i class="c t0 x"></i>call after the stop</span>
<span><i class="cp"></i>context compaction</span>
</div></section>
"""

# Hover labels ("call N · tool") computed on demand, so cells stay tiny in the markup.
SCRIPT = """<div id="hover"></div><script>
(function(){var tip=document.getElementById('hover');
document.addEventListener('mouseover',function(ev){var c=ev.target;
if(!c.classList||!c.classList.contains('c')||!c.parentNode.dataset.tools){tip.style.display='none';return;}
var cells=c.parentNode.querySelectorAll('.c'),i=Array.prototype.indexOf.call(cells,c)+1;
var tools=c.parentNode.dataset.tools.split('\\u001f'),m=/\\bt(\\d+)\\b/.exec(c.className);
var text=c.title||('call '+i+(m&&tools.length<=12?' · '+tools[+m[1]]:''));
tip.textContent=text;tip.style.display='block';tip.style.left=(ev.clientX+12)+'px';
tip.style.top=(ev.clientY+12)+'px';});})();
</script>
"""
