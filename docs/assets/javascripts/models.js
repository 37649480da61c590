// "Find your model" (docs/models.md): type a model's name, see what its norms are, compare two models.
// Plain JavaScript and inline SVG, no library, no network. The census rows come embedded in the page
// (<script type="application/json" id="mf-data">, written at build time by site_hooks/census.py from
// docs/data/census.json). The address keeps the choice: #model=qwen3&compare=gemma3_text.
(function () {
  "use strict";
  var SVGNS = "http://www.w3.org/2000/svg";
  var MAX_RESULTS = 8;
  var ROLE_WORDS = {
    input: "on the sub-layer's input", sublayer_output: "on the sub-layer's output, before the addition",
    residual_sum: "on the residual stream, after the addition", q_per_head: "queries, per head",
    k_per_head: "keys, per head", q_whole: "queries, whole projection", k_whole: "keys, whole projection",
    v_per_head: "values, per head", v_whole: "values, whole projection", latent: "a compressed latent", inner_output: "inside the sub-layer, on what its output projection reads",
    final: "the final hidden state", embedding: "the embeddings", other: "other"
  };
  var ROLE_SHORT = { q_per_head: "q, per head", k_per_head: "k, per head", q_whole: "q, whole projection",
                     k_whole: "k, whole projection", v_per_head: "v, per head", v_whole: "v, whole projection", latent: "latent",
                     inner_output: "before the output projection", other: "other" };

  function key(s) { return String(s || "").toLowerCase().replace(/[^a-z0-9]/g, ""); }

  function el(tag, attrs, children) {
    var node = document.createElement(tag);
    if (attrs) Object.keys(attrs).forEach(function (k) {
      if (k === "text") node.textContent = attrs[k];
      else if (k === "className") node.className = attrs[k];
      else node.setAttribute(k, attrs[k]);
    });
    (children || []).forEach(function (c) {
      if (c === null || c === undefined) return;
      node.appendChild(typeof c === "string" ? document.createTextNode(c) : c);
    });
    return node;
  }

  function svg(tag, attrs, text) {
    var node = document.createElementNS(SVGNS, tag);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, attrs[k]); });
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function link(href, text) { return el("a", { href: href, text: text }); }
  function code(text) { return el("code", { text: text }); }
  function fmtEps(v) {
    if (v === null || v === undefined) return "not set by the config";
    return v !== 0 && Math.abs(v) < 1e-3 ? v.toExponential().replace(/e-(\d)$/, "e-0$1") : String(v);
  }

  // ---------------------------------------------------------------- search
  function Finder(data) {
    this.data = data;
    this.byType = {};
    this.items = data.models.slice();
    data.models.forEach(function (m) {
      this.byType[m.t] = m;
      m.exact = [key(m.t), key(m.name)].filter(Boolean);
      m.words = [key(m.cls), key(m.cfg)].concat(m.norms.map(key)).filter(Boolean);
    }, this);
    // a released checkpoint is its model type's card with the values its config sets
    (data.checkpoints || []).forEach(function (c) {
      var base = this.byType[c.t];
      if (!base) return;
      var st = c.st || {};
      var m = Object.assign({}, base, {
        t: c.r, name: c.rel || "", ck: c, base: base, eps: c.eps !== null ? c.eps : base.eps,
        pl: st.placement || base.pl, qk: st.qk_norm || base.qk, rope: st.qk_rope !== undefined ? st.qk_rope : base.rope,
        par: st.parallel !== undefined ? !!st.parallel : base.par, final: st.final_norm !== undefined ? !!st.final_norm : base.final,
        say: c.say || base.say
      });
      if (st.norms) m.layer = st.norms.map(function (n) { return [n.module, n["class"], n.role, n.sublayer, null]; });
      m.exact = [key(c.r), key(c.r.split("/")[1])].concat(c.al.map(key), c.al.map(function (a) { return key(a.split("/")[1]); }));
      m.words = [key(c.rel)].filter(Boolean);
      this.byType[c.r] = m;
      this.items.push(m);
    }, this);
  }

  // 0: the family name itself ("Gemma 3" is gemma3_text); 0.5: the model type itself; 1: it starts with the
  // query, or a class is the query; 2: a class starts with it; 3: it appears anywhere; -1: no match
  Finder.prototype.score = function (m, q) {
    if (m.name && key(m.name) === q) return 0;
    if (m.exact.indexOf(q) >= 0) return 0.5;
    if (m.exact.some(function (w) { return w.indexOf(q) === 0; }) || m.words.indexOf(q) >= 0) return 1;
    if (m.words.some(function (w) { return w.indexOf(q) === 0; })) return 2;
    if (m.exact.concat(m.words).some(function (w) { return w.indexOf(q) >= 0; })) return 3;
    return -1;
  };

  Finder.prototype.search = function (text) {
    var q = key(text);
    if (!q) return [];
    var self = this;
    return this.items
      .map(function (m) { return { m: m, s: self.score(m, q) }; })
      .filter(function (r) { return r.s >= 0; })
      .sort(function (a, b) { return a.s - b.s || a.m.t.length - b.m.t.length || (a.m.t < b.m.t ? -1 : 1); })
      .map(function (r) { return r.m; });
  };

  // ---------------------------------------------------------------- the placement diagram
  // One decoder layer, top to bottom: the residual stream is the line on the left; each sub-layer branches
  // off it, runs through its norms and its own box, and is added back at the "+".
  var W = 340, STREAM = 16, BRANCH = 34, BOX_X = 46, BOX_W = W - BOX_X - 6, ROW = 26, GAP = 8, LINE = 15;

  function clip(text, n) { return text.length > n ? text.slice(0, n - 1) + "\u2026" : text; }

  // a parallel block (attention and MLP read the same input) is one branch holding both
  function groups(layer, par) {
    var out = [];
    layer.forEach(function (e) {
      var sub = e[3] || null, last = out[out.length - 1];
      if (par && sub) sub = "attention+mlp";
      if (!last || last.sub !== sub) { last = { sub: sub, items: [] }; out.push(last); }
      last.items.push({ module: e[0], cls: e[1], role: e[2], note: e[4] || "" });
    });
    return out;
  }

  function drawDiagram(m) {
    var root = svg("svg", { "class": "mf-diagram", role: "img", width: "100%" });
    var body = svg("g");
    var y = 6, parts = [];
    function box(x, w, label, kind, title, extra) {
      var h = ROW + (extra ? extra.length * LINE : 0);
      var g = svg("g", { "class": "mf-box mf-" + kind });
      g.appendChild(svg("title", {}, title || label));
      g.appendChild(svg("rect", { x: x, y: y, width: w, height: h, rx: 4 }));
      g.appendChild(svg("text", { x: x + 8, y: y + 17 }, clip(label, Math.floor((w - 14) / 6.7))));
      (extra || []).forEach(function (line, i) {
        g.appendChild(svg("text", { x: x + 14, y: y + 17 + LINE * (i + 1), "class": "mf-inner" },
                          clip(line, Math.floor((w - 20) / 6.1))));
      });
      body.appendChild(g);
      var mid = y + h / 2;
      y += h + GAP;
      return mid;
    }
    function normLabel(it) { return it.module + " \u00b7 " + it.cls; }
    function normTitle(it, words) { return normLabel(it) + ": " + words + (it.note ? " (" + it.note + ")" : ""); }
    body.appendChild(svg("text", { x: STREAM + 8, y: y + 10, "class": "mf-note" }, "residual stream in"));
    y += 20;
    var top = y - 6;
    groups(m.layer, m.par).forEach(function (g) {
      if (!g.sub) {  // norms outside both sub-layers sit on the stream itself
        g.items.forEach(function (it) {
          box(4, W - 10, normLabel(it), "norm", normTitle(it, ROLE_WORDS[it.role] || it.role));
        });
        return;
      }
      var pre = [], inner = [], post = [], after = [];
      g.items.forEach(function (it) {
        if (it.role === "input") pre.push(it);
        else if (it.role === "sublayer_output") post.push(it);
        else if (it.role === "residual_sum") after.push(it);
        else inner.push(it);
      });
      var yBranch = y, ticks = [];
      body.appendChild(svg("circle", { cx: STREAM, cy: yBranch, r: 3, "class": "mf-dot" }));
      y += 8;
      pre.forEach(function (it) { ticks.push(box(BOX_X, BOX_W, normLabel(it), "norm", normTitle(it, ROLE_WORDS.input))); });
      var lines = inner.map(function (it) {
        var rope = (it.role.charAt(0) === "q" || it.role.charAt(0) === "k") && m.rope ? ", " + m.rope + " RoPE" : "";
        return it.module + " \u00b7 " + (ROLE_SHORT[it.role] || it.role) + rope;
      });
      ticks.push(box(BOX_X, BOX_W, g.sub === "mlp" ? "MLP" : g.sub === "attention+mlp" ? "attention and MLP, in parallel" : g.sub, "sublayer", g.sub + (lines.length ? ": " + inner.map(function (it, i) {
        return lines[i] + " (" + it.cls + (it.note ? "; " + it.note : "") + ")"; }).join("; ") : ""), lines));
      post.forEach(function (it) { ticks.push(box(BOX_X, BOX_W, normLabel(it), "norm", normTitle(it, ROLE_WORDS.sublayer_output))); });
      var yAdd = y + 4;
      body.appendChild(svg("path", { d: "M" + STREAM + " " + yBranch + " H" + BRANCH + " V" + yAdd + " H" + (STREAM + 7), "class": "mf-branch" }));
      ticks.forEach(function (t) { body.appendChild(svg("path", { d: "M" + BRANCH + " " + t + " H" + BOX_X, "class": "mf-branch" })); });
      body.appendChild(svg("circle", { cx: STREAM, cy: yAdd, r: 7, "class": "mf-add" }));
      body.appendChild(svg("text", { x: STREAM, y: yAdd + 4, "class": "mf-plus" }, "+"));
      parts.push(yAdd);
      y = yAdd + 7 + GAP + 2;
      after.forEach(function (it) { box(4, W - 10, normLabel(it), "norm", normTitle(it, ROLE_WORDS.residual_sum)); });
    });
    if (m.final) {
      body.appendChild(svg("text", { x: STREAM + 8, y: y + 10, "class": "mf-note" }, "\u2026 the other layers \u2026"));
      y += 20;
      box(4, W - 10, "final norm, after the last layer", "norm", "a norm on the last layer's output");
    }
    body.appendChild(svg("text", { x: STREAM + 8, y: y + 10, "class": "mf-note" }, m.final ? "to the output head" : "to the next layer"));
    var bottom = y + 14;
    // the stream is drawn first so the boxes on it cover it
    body.insertBefore(svg("path", { d: "M" + STREAM + " " + top + " V" + bottom, "class": "mf-stream" }), body.firstChild);
    root.setAttribute("viewBox", "0 0 " + W + " " + (bottom + 6));
    root.appendChild(svg("title", {}, "Norms of one " + m.t + " decoder layer, in the order they run"));
    root.appendChild(body);
    return root;
  }

  // ---------------------------------------------------------------- the card
  function facts(m, data) {
    var rows = [];
    function row(label, value) { rows.push([label, value]); }
    var classes = m.norms.map(function (n) {
      var c = data.classes[n];
      var src = c && c.src ? link(c.src, c.file + ":" + c.line) : null;
      var entry = c && c.cat ? [" \u2192 ", link(data.catalog[c.cat].href, c.cat)] : [" \u2192 no catalog entry"];
      return el("span", { className: "mf-class" }, [code(n), src ? " (" : "", src, src ? ")" : ""].concat(entry));
    });
    row("norm class", classes.length ? joinNodes(classes) : "none found");
    var cats = m.cat.map(function (e) {
      var c = data.catalog[e];
      return el("span", {}, [link(c.href, e), " \u2014 " + c.title]);
    });
    row("convention", cats.length ? joinNodes(cats) : "no catalog entry reproduces it (see below)");
    row("eps", fmtEps(m.eps) + (m.eps_attr ? " (config " + m.eps_attr + ")" : ""));
    row("placement", m.pl + ": " + (data.placement[m.pl] || m.pl) + (m.pln ? " (" + m.pln + ")" : ""));
    row("gain", m.say.gain);
    row("QK-norm", m.say.qk);
    row("final norm", m.say.final);
    row("engines", link("../engines/#model-" + (m.base ? m.base.t : m.t), "what the serving and training engines compute for it"));
    var odd = unusual(m, data);
    row("unusual", odd.length ? joinNodes(odd.map(function (t) { return el("span", { text: t }); })) : "nothing");
    return rows;
  }

  function joinNodes(nodes) {
    var span = el("span");
    nodes.forEach(function (n, i) { if (i) span.appendChild(document.createTextNode("; ")); span.appendChild(n); });
    return span;
  }

  function unusual(m, data) {
    var out = [];
    m.norms.forEach(function (n) {
      var c = data.classes[n];
      if (!c) return;
      if (c.gain === "1+w") out.push(n + " stores its gain as w and multiplies by (1 + w)");
      if (c.gain === "none") out.push(n + " has no learned gain");
      if (c.bias) out.push(n + " adds a bias");
      if (!c.cat && c.reason) out.push(n + ": " + c.reason);
      else if (!c.cat && c.closest) out.push(n + " matches no catalog entry bit for bit; closest " + c.closest +
                                             (c.ulp !== null ? ", up to " + c.ulp + " ulp apart" : ""));
      if (c.note) out.push(n + ": " + c.note);
      if (c.exception) out.push(n + ": " + c.exception);
    });
    m.extra.forEach(function (e) { out.push("extra norm: " + e); });
    if (m.eps === null || m.eps === undefined) out.push("the config sets no eps");
    return out;
  }

  function codeBlock(entry, c) {
    var box = el("div", { className: "mf-code" });
    if (!c.code) {
      box.appendChild(el("p", {}, ["No standalone function for ", code(entry), " yet: the formulas and the reference are in ",
                                   link(c.href, "its catalog section"), "."]));
      return box;
    }
    var pre = el("pre", {}, [el("code", { text: c.code.code })]);
    var btn = el("button", { type: "button", className: "mf-copy md-button", text: "Copy" });
    btn.addEventListener("click", function () {
      var done = function () { btn.textContent = "Copied"; setTimeout(function () { btn.textContent = "Copy"; }, 1500); };
      if (navigator.clipboard && navigator.clipboard.writeText) navigator.clipboard.writeText(c.code.code).then(done, function () {});
    });
    box.appendChild(el("div", { className: "mf-code-head" }, [code(c.code.function), " from ", code(c.code.file),
                                                              " (torch only) ", btn]));
    box.appendChild(pre);
    return box;
  }

  function renderCard(card, m, data) {
    card.textContent = "";
    card.hidden = false;
    card.setAttribute("data-model", m.t);
    card.appendChild(el("h3", { className: "mf-title" }, [code(m.t), m.name ? " " + m.name : ""]));
    var named = [m.cls, m.cfg].filter(Boolean).join(", ");
    card.appendChild(el("p", { className: "mf-sub" }, [named ? named + " \u00b7 " : "",
                                                      m.src ? link(m.src, "modeling file") : "modeling file not found",
                                                      " in transformers " + data.transformers]));
    if (m.status !== "traced") {
      card.appendChild(el("p", { className: "mf-error" }, ["The census could not build or trace this model: ", code(m.error || "error")]));
    }
    card.appendChild(m.ck ? checkpointBox(m, data) : variantsBox(m));
    var dl = el("dl", { className: "mf-facts" });
    facts(m, data).forEach(function (r) {
      dl.appendChild(el("dt", { text: r[0] }));
      dl.appendChild(el("dd", {}, [r[1]]));
    });
    card.appendChild(dl);
    if (m.layer.length) {
      card.appendChild(el("figure", { className: "mf-figure" }, [drawDiagram(m), el("figcaption", {
        text: "One decoder layer as the census traced it: each norm where its input comes from." })]));
    }
    m.cat.forEach(function (entry) {
      var c = data.catalog[entry];
      var det = el("details", { className: "mf-copyblock" }, [el("summary", {}, ["Code to copy for ", code(entry)])]);
      det.appendChild(codeBlock(entry, c));
      det.appendChild(el("p", { className: "mf-same" }, [c.same.length
        ? "Bit-identical to it in the conformance study: " + c.same.join("; ") + "."
        : "The conformance study measured no implementation outside transformers that reproduces it bit for bit."]));
      card.appendChild(det);
    });
  }

  // ---------------------------------------------------------------- configs: a checkpoint's values, a default's variants
  function fmtValue(v) { return typeof v === "number" ? fmtEps(v) : String(v); }

  function checkpointBox(m, data) {
    var c = m.ck, base = m.base;
    var box = el("div", { className: "mf-config mf-checkpoint" });
    box.appendChild(el("p", {}, ["The released config of ", code(c.r), " (model type ", code(c.t),
      "): its values beside the default config of ", code(base.cfg || c.t), "."]));
    var rows = Object.keys(c.vals).map(function (f) {
      var v = c.vals[f];
      var variant = base.vars.filter(function (x) { return x.f === f; })[0];
      var dflt = f === base.eps_attr ? fmtEps(base.eps) : variant ? fmtValue(variant.d) : "-";
      var reads = v.reads.map(function (r) { return r[0] + " (" + r[1] + "): " + fmtValue(r[2]); }).join("; ");
      return el("tr", { className: v.ok ? "" : "mf-disagree" }, [el("th", {}, [code(f)]),
        el("td", { text: fmtValue(v.v) }), el("td", { text: dflt }),
        el("td", { text: (v.ok ? "" : "sources disagree: ") + reads })]);
    });
    var head = el("tr", {}, ["field", "this checkpoint", "default config", "read from"].map(function (h) { return el("th", { text: h }); }));
    box.appendChild(el("div", { className: "mf-table-wrap" }, [el("table", {}, [el("thead", {}, [head]), el("tbody", {}, rows)])]));
    box.appendChild(el("p", { text: c.set.length ? "It sets " + c.set.join(", ") + " away from the default: the structure below is that variant's trace."
      : "It sets no field that changes the structure: the structure below is the default config's." }));
    return box;
  }

  function variantsBox(m) {
    var box = el("div", { className: "mf-config mf-default" });
    box.appendChild(el("p", {}, ["This card is the default config of ", code(m.cfg || m.t),
      ", which a released checkpoint may not use. ", m.vars.length
        ? "Config fields that change its norm structure (found by changing each and tracing again):"
        : "Changing its config's fields one at a time changes no norm structure."]));
    if (m.vars.length) {
      box.appendChild(el("ul", {}, m.vars.map(function (v) {
        var on = v.req ? " (with " + Object.keys(v.req).map(function (k) { return k + "=" + v.req[k]; }).join(", ") + ")" : "";
        var what = "placement " + v.pl + ", QK-norm " + v.qk + (v.par ? ", parallel block" : "") + (v.clip ? ", q/k/v clipped" : "") +
          " (changes: " + v.ch.join(", ") + ")";
        return el("li", {}, [code(v.f + "=" + fmtValue(v.v)), on + ": " + what + ". ",
          v.set.length ? el("span", {}, ["Set by: "].concat(v.set.map(function (r, i) { return el("span", {}, [i ? ", " : "", code(r)]); })))
                       : "No recorded released checkpoint sets it."]);
      })));
    }
    return box;
  }

  // ---------------------------------------------------------------- comparison
  var COMPARED = [
    ["norm class", function (m) { return m.norms.join(", ") || "none"; }],
    ["convention", function (m) { return m.cat.join(", ") || "none"; }],
    ["eps", function (m) { return fmtEps(m.eps); }],
    ["placement", function (m) { return m.pl; }],
    ["parallel block", function (m) { return m.par ? "yes" : "no"; }],
    ["QK-norm", function (m) { return m.qk; }],
    ["gain", function (m) { return m.say.gain; }],
    ["QK-norm and RoPE", function (m) { return m.say.qk; }],
    ["final norm", function (m) { return m.say.final; }],
    ["extra norms", function (m) { return m.extra.join(", ") || "none"; }]
  ];

  function renderDiff(box, a, b) {
    box.textContent = "";
    box.hidden = false;
    var head = el("tr", {}, [el("th", { text: "" }), el("th", {}, [code(a.t)]), el("th", {}, [code(b.t)])]);
    var rows = COMPARED.map(function (c) {
      var va = c[1](a), vb = c[1](b), differs = va !== vb;
      return el("tr", { className: differs ? "mf-differs" : "mf-same-row" }, [
        el("th", { text: c[0] + (differs ? " \u2260" : "") }), el("td", { text: va }), el("td", { text: vb })]);
    });
    box.appendChild(el("p", { className: "mf-diff-title", text: "Side by side (rows marked \u2260 differ)" }));
    box.appendChild(el("div", { className: "mf-table-wrap" }, [el("table", {}, [el("thead", {}, [head]), el("tbody", {}, rows)])]));
  }

  // ---------------------------------------------------------------- wiring
  function init(root) {
    var dataEl = document.getElementById("mf-data");
    var data;
    try { data = JSON.parse(dataEl.textContent); } catch (e) {
      root.textContent = "The census data of this page could not be read: " + e.message;
      root.className += " mf-failed";
      return;
    }
    var finder = new Finder(data);
    var chosen = { a: null, b: null };
    var diff = root.querySelector(".mf-diff");

    function card(slot) { return root.querySelector('.mf-card[data-slot="' + slot + '"]'); }

    function update(pushHash) {
      ["a", "b"].forEach(function (slot) {
        var m = chosen[slot] && finder.byType[chosen[slot]];
        if (m) renderCard(card(slot), m, data); else { card(slot).hidden = true; card(slot).textContent = ""; }
      });
      var both = chosen.a && chosen.b;
      root.classList.toggle("mf-two", !!both);
      if (both) renderDiff(diff, finder.byType[chosen.a], finder.byType[chosen.b]); else diff.hidden = true;
      if (pushHash) {
        var h = [];
        if (chosen.a) h.push("model=" + encodeURIComponent(chosen.a));
        if (chosen.b) h.push("compare=" + encodeURIComponent(chosen.b));
        history.replaceState(null, "", h.length ? "#" + h.join("&") : location.pathname + location.search);
      }
    }

    function fromHash() {
      var params = {};
      location.hash.replace(/^#/, "").split("&").forEach(function (kv) {
        var i = kv.indexOf("=");
        if (i > 0) params[kv.slice(0, i)] = decodeURIComponent(kv.slice(i + 1));
      });
      if (!params.model && !params.compare) return false;
      chosen.a = finder.byType[params.model] ? params.model : null;
      chosen.b = finder.byType[params.compare] ? params.compare : null;
      ["a", "b"].forEach(function (slot) {
        root.querySelector('.mf-picker[data-slot="' + slot + '"] input').value = chosen[slot] || "";
      });
      update(false);
      return true;
    }

    root.querySelectorAll(".mf-picker").forEach(function (picker) {
      var slot = picker.getAttribute("data-slot");
      var input = picker.querySelector("input");
      var list = picker.querySelector(".mf-results");
      function choose(t) {
        chosen[slot] = t;
        input.value = t;
        list.textContent = "";
        update(true);
      }
      function show() {
        list.textContent = "";
        var found = finder.search(input.value);
        if (!input.value.trim()) return;
        if (!found.length) { list.appendChild(el("li", { className: "mf-none", text: "No model type or checkpoint matches." })); return; }
        found.slice(0, MAX_RESULTS).forEach(function (m) {
          var b = el("button", { type: "button", className: "mf-result", "data-model": m.t }, [
            code(m.t), m.name ? " " + m.name : "",
            el("span", { className: "mf-hint", text: m.ck ? " checkpoint \u00b7 " + m.ck.t + " \u00b7 eps " + fmtEps(m.eps) : m.status === "traced"
              ? " " + (m.norms[0] || "no norm") + " \u00b7 " + (m.cat[0] || "unmatched") + " \u00b7 " + m.pl
              : " not traced (see its card)" })]);
          b.addEventListener("click", function () { choose(m.t); });
          list.appendChild(el("li", {}, [b]));
        });
        if (found.length > MAX_RESULTS) list.appendChild(el("li", { className: "mf-none", text: (found.length - MAX_RESULTS) + " more: type more of the name." }));
      }
      input.addEventListener("input", show);
      input.addEventListener("keydown", function (ev) {
        if (ev.key === "Enter") {
          var first = finder.search(input.value)[0];
          if (first) choose(first.t);
          ev.preventDefault();
        }
        ev.stopPropagation();  // keep Material's keyboard shortcuts (s, /, n, p) out of the finder's inputs
      });
      input.addEventListener("keyup", function (ev) { ev.stopPropagation(); });
      input.addEventListener("keypress", function (ev) { ev.stopPropagation(); });
      input.addEventListener("search", function () { if (!input.value) { chosen[slot] = null; list.textContent = ""; update(true); } });
    });
    window.addEventListener("hashchange", fromHash);
    fromHash();
    root.setAttribute("data-ready", "true");
  }

  function start() {
    var root = document.getElementById("model-finder");
    if (root && root.getAttribute("data-ready") !== "true") init(root);
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start); else start();
}());
