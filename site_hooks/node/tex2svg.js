// Renders TeX to SVG at build time. Reads one JSON object per line on stdin, {"tex": "...", "display": true},
// and writes one per line on stdout, {"svg": "<mjx-container ...>"} or {"error": "..."}.
// The first line written is {"css": "..."}: the stylesheet the SVG output needs, once per page.
"use strict";
const readline = require("readline");
// MathJax writes notes with console.log: stdout carries the JSON replies only
console.log = console.info = console.warn = (...a) => process.stderr.write(a.join(" ") + "\n");

require("mathjax").init({
  loader: { load: ["input/tex-full", "output/svg", "adaptors/liteDOM", "a11y/assistive-mml"] },
  tex: { processEscapes: true, processEnvironments: true },
  svg: { fontCache: "local" },
  startup: { typeset: false },
}).then((MathJax) => {
  const adaptor = MathJax.startup.adaptor;
  const write = (obj) => process.stdout.write(JSON.stringify(obj) + "\n");
  write({ css: adaptor.textContent(MathJax.svgStylesheet()) });
  const lines = readline.createInterface({ input: process.stdin, terminal: false });
  lines.on("line", (line) => {
    let req;
    try {
      req = JSON.parse(line);
    } catch (e) {
      write({ error: "not JSON: " + String(e) });
      return;
    }
    try {
      const node = MathJax.tex2svg(req.tex, { display: !!req.display });
      const html = adaptor.outerHTML(node);
      // a TeX error is drawn, not thrown: find it and report the message instead
      const err = adaptor.getAttribute(node, "data-mjx-error") || (html.includes('data-mml-node="merror"') ?
        (html.match(/data-mjx-error="([^"]*)"/) || [null, "TeX error"])[1] : null);
      write(err ? { error: err } : { svg: html });
    } catch (e) {
      write({ error: String(e && e.message || e) });
    }
  });
}).catch((e) => {
  process.stderr.write("tex2svg: MathJax failed to start: " + String(e) + "\n");
  process.exit(2);
});
