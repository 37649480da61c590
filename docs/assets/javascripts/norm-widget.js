// Interactive LayerNorm / RMSNorm playground. Plain JavaScript and inline SVG, no library, no network.
//
// Every <div class="norm-widget" data-dim="3"> (data-dim 2 or 3) becomes a widget: the reader sets a
// vector x, a scale c, a shift s (added to every component) and eps, and sees both norms of the input
// c*x + s*1, with gain 1 and bias 0, as numbers and as a picture. tests/site/test_widget.py compares the
// displayed numbers with the float64 NumPy oracle.
(function () {
  "use strict";
  var SVGNS = "http://www.w3.org/2000/svg";
  var VIEW = 150;          // the picture spans -VIEW..VIEW in both directions
  var UNIT = 44;           // picture units per unit of x: the sphere of radius sqrt(3) is 76 wide
  var counter = 0;

  // ---- the mathematics (float64, same order of operations as the NumPy oracle) ----
  function mean(v) {
    var s = 0;
    for (var i = 0; i < v.length; i++) s += v[i];
    return s / v.length;
  }

  function layerNorm(v, eps) {
    var mu = mean(v);
    var c = v.map(function (a) { return a - mu; });
    var variance = mean(c.map(function (a) { return a * a; }));
    var denom = variance + eps;
    var r = 1 / Math.sqrt(denom);
    return { mean: mu, variance: variance, r: r, defined: denom > 0,
             y: c.map(function (a) { return denom > 0 ? a * r : NaN; }) };
  }

  function rmsNorm(v, eps) {
    var ms = mean(v.map(function (a) { return a * a; }));
    var denom = ms + eps;
    var r = 1 / Math.sqrt(denom);
    return { rms: Math.sqrt(ms), r: r, defined: denom > 0,
             y: v.map(function (a) { return denom > 0 ? a * r : NaN; }) };
  }

  function norm2(v) { return Math.sqrt(v.reduce(function (s, a) { return s + a * a; }, 0)); }
  function maxAbsDiff(a, b) {
    var m = 0;
    for (var i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i] - b[i]));
    return m;
  }

  function fmt(v) {
    if (!isFinite(v)) return "undefined";
    var s = v.toFixed(4);
    return s === "-0.0000" ? "0.0000" : s;
  }

  // ---- projection: the all-ones direction points up the screen (as in the site's diagrams) ----
  function unit(v) { var n = norm2(v); return v.map(function (a) { return a / n; }); }
  function dot(a, b) { var s = 0; for (var i = 0; i < a.length; i++) s += a[i] * b[i]; return s; }
  function cross(a, b) { return [a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]]; }
  function comb(ca, a, cb, b) { return a.map(function (v, i) { return ca * v + cb * b[i]; }); }

  function camera(dim) {
    if (dim === 2) return { right: [1, 0], up: [0, 1], toward: null };
    var n = unit([1, 1, 1]), a = unit([1, -1, 0]), b = cross(n, a);
    var phi = -15 * Math.PI / 180, t = 22 * Math.PI / 180;
    var w = comb(Math.cos(phi), a, Math.sin(phi), b);
    var toward = comb(Math.cos(t), w, Math.sin(t), n);
    var up = unit(comb(1, n, -dot(n, toward), toward));
    return { right: cross(up, toward), up: up, toward: toward };
  }

  function el(tag, attrs, parent, ns) {
    var e = ns ? document.createElementNS(SVGNS, tag) : document.createElement(tag);
    for (var k in attrs) if (Object.prototype.hasOwnProperty.call(attrs, k)) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }

  function build(root) {
    var dim = parseInt(root.getAttribute("data-dim") || "3", 10);
    if (dim !== 2 && dim !== 3) {
      root.textContent = "norm-widget: data-dim must be 2 or 3, got " + JSON.stringify(root.getAttribute("data-dim")) + ".";
      root.classList.add("nw-error");
      root.setAttribute("data-ready", "error");
      return;
    }
    var id = "nw" + (++counter) + "-";
    var cam = camera(dim);
    // the default input is shorter than sqrt(d), so the RMSNorm arrow reaches past the input's tip and shows
    var state = { x: dim === 3 ? [1.2, 0.3, -0.6] : [0.9, -0.3], c: 1, s: 0, eps: 0 };
    var defaults = JSON.parse(JSON.stringify(state));
    root.innerHTML = "";
    root.setAttribute("role", "group");
    root.setAttribute("aria-label", "LayerNorm and RMSNorm playground");

    // ---- controls ----
    var controls = el("div", { "class": "nw-controls" }, root);
    var inputs = {};
    function control(parent, key, label, min, max, step, hint) {
      var row = el("div", { "class": "nw-row" }, parent);
      var lab = el("label", { "for": id + key }, row);
      lab.innerHTML = label;
      var range = el("input", { type: "range", min: min, max: max, step: step, id: id + key + "-range",
                                "aria-label": lab.textContent + " (slider)", "data-control": key + "-range" }, row);
      var num = el("input", { type: "number", step: step, id: id + key, "data-control": key,
                              inputmode: "decimal" }, row);
      if (hint) num.setAttribute("aria-describedby", id + "msg");
      inputs[key] = { range: range, num: num };
      function fromInput(source) {
        var v = parseFloat(source.value);
        var ok = source.value.trim() !== "" && isFinite(v) && !(key === "eps" && v < 0);
        num.setAttribute("aria-invalid", ok ? "false" : "true");
        if (!ok) { message(key === "eps" && v < 0 ? "eps must be 0 or more." : label.replace(/<[^>]+>/g, "") + ": enter a number."); return; }
        set(key, v, source);
      }
      range.addEventListener("input", function () { fromInput(range); });
      num.addEventListener("input", function () { fromInput(num); });
      num.addEventListener("change", function () { fromInput(num); });
    }
    var fx = el("fieldset", {}, controls);
    el("legend", {}, fx).textContent = "vector x";
    for (var i = 0; i < dim; i++) control(fx, "x" + i, "x<sub>" + (i + 1) + "</sub>", -3, 3, 0.01);
    var ft = el("fieldset", {}, controls);
    el("legend", {}, ft).textContent = "input = c·x + s";
    control(ft, "c", "scale c", -3, 3, 0.01);
    control(ft, "s", "shift s", -3, 3, 0.01);
    control(ft, "eps", "eps", 0, 1, 0.001, true);
    // presets: one per "thing to try" on the page, then Reset
    var presetBar = el("div", { "class": "nw-presets", role: "group", "aria-label": "presets" }, root);
    var ones = dim === 3 ? [1, 1, 1] : [1, 1];
    var PRESETS = [
      ["scale", "Scale it", { c: 2.5, s: 0, eps: 0 }],
      ["shift", "Shift it", { c: 1, s: 1.5, eps: 0 }],
      ["small", "Small input, eps", { c: 0.05, s: 0, eps: 0.01 }],
      ["constant", "Constant row", { x: ones.slice(), c: 1, s: 0, eps: 0 }],
    ];
    PRESETS.forEach(function (pr) {
      var b = el("button", { type: "button", "class": "nw-preset", "data-preset": pr[0] }, presetBar);
      b.textContent = pr[1];
      b.addEventListener("click", function () {
        state = JSON.parse(JSON.stringify(defaults));
        Object.keys(pr[2]).forEach(function (k) { state[k] = JSON.parse(JSON.stringify(pr[2][k])); });
        Object.keys(inputs).forEach(function (k) { inputs[k].num.setAttribute("aria-invalid", "false"); });
        render(null);
      });
    });
    var reset = el("button", { type: "button", "class": "nw-preset nw-reset" }, presetBar);
    reset.textContent = "Reset";

    // ---- picture ----
    var figure = el("div", { "class": "nw-figure" }, root);
    var svg = el("svg", { viewBox: (-VIEW) + " " + (-VIEW) + " " + (2 * VIEW) + " " + (2 * VIEW), "class": "nw-plot",
                          role: "img", "aria-labelledby": id + "plot-title" }, figure, true);
    el("title", { id: id + "plot-title" }, svg, true).textContent = dim === 3
      ? "The input and both outputs in 3-D; the all-ones direction points up. RMSNorm lands on the sphere of radius sqrt(3), LayerNorm on the circle orthogonal to the all-ones direction."
      : "The input and both outputs in the plane. RMSNorm lands on the circle of radius sqrt(2), LayerNorm on the line orthogonal to (1, 1).";
    var defs = el("defs", {}, svg, true);
    ["in", "ln", "rms", "muted"].forEach(function (k) {
      var m = el("marker", { id: id + "head-" + k, viewBox: "0 0 10 10", refX: "9", refY: "5", markerWidth: "10",
                             markerHeight: "10", markerUnits: "userSpaceOnUse", orient: "auto-start-reverse" }, defs, true);
      el("path", { d: "M0 0 L10 5 L0 10 Z", "class": "nw-fill-" + k }, m, true);
    });
    function P(v) {   // 2-D or 3-D point -> screen
      return [UNIT * dot(v, cam.right), -UNIT * dot(v, cam.up)];
    }
    var R = Math.sqrt(dim);
    el("circle", { cx: 0, cy: 0, r: UNIT * R, "class": "nw-sphere" }, svg, true);
    if (dim === 3) {
      var n = unit(ones), a = unit([1, -1, 0]), b = cross(n, a);
      var front = "", back = "";
      for (var k = 0; k <= 96; k++) {
        var th = 2 * Math.PI * k / 96;
        var p3 = comb(R * Math.cos(th), a, R * Math.sin(th), b);
        var q = P(p3), isFront = dot(p3, cam.toward) >= 0;
        var seg = q[0].toFixed(1) + " " + q[1].toFixed(1);
        if (isFront) front += (front ? " L" : "M") + seg; else back += (back ? " L" : "M") + seg;
      }
      el("path", { d: back, "class": "nw-ln-set nw-back" }, svg, true);
      el("path", { d: front, "class": "nw-ln-set" }, svg, true);
    } else {
      var e = P([2.9, -2.9]), f = P([-2.9, 2.9]);
      el("line", { x1: e[0], y1: e[1], x2: f[0], y2: f[1], "class": "nw-ln-set" }, svg, true);
    }
    var oneTip = P(ones.map(function (v) { return v * 1.25 / Math.sqrt(dim); }));
    el("line", { x1: 0, y1: 0, x2: oneTip[0], y2: oneTip[1], "class": "nw-axis", "marker-end": "url(#" + id + "head-muted)" }, svg, true);
    var oneLabel = el("text", { x: oneTip[0] + 6, y: oneTip[1] + 4, "class": "nw-label" }, svg, true);
    oneLabel.textContent = "1";
    var footLine = el("line", { "class": "nw-foot" }, svg, true);
    // RMSNorm's output lies along the input, so it is drawn wide underneath and the input thin on top
    var arrowRms = el("line", { "class": "nw-vec nw-rms", "marker-end": "url(#" + id + "head-rms)" }, svg, true);
    var arrowLn = el("line", { "class": "nw-vec nw-ln", "marker-end": "url(#" + id + "head-ln)" }, svg, true);
    var arrowIn = el("line", { "class": "nw-vec nw-in", "marker-end": "url(#" + id + "head-in)" }, svg, true);
    el("circle", { cx: 0, cy: 0, r: 2.5, "class": "nw-origin" }, svg, true);
    var handle = el("circle", { r: 16, "class": "nw-handle", tabindex: "0", role: "button",
                                "aria-roledescription": "draggable handle",
                                "aria-label": "tip of the input vector: drag it, or move it with the arrow keys" }, svg, true);
    var legend = el("p", { "class": "nw-legend" }, figure);
    legend.innerHTML = '<span class="nw-key nw-key-in"></span>input c·x + s ' +
      '<span class="nw-key nw-key-ln"></span>LayerNorm ' +
      '<span class="nw-key nw-key-rms"></span>RMSNorm';

    // ---- numbers ----
    var out = el("div", { "class": "nw-out" }, root);
    var table = el("table", { "class": "nw-table" }, out);
    var head = el("tr", {}, el("thead", {}, table));
    ["i", "input", "LayerNorm", "RMSNorm"].forEach(function (h) { el("th", { scope: "col" }, head).textContent = h; });
    var body = el("tbody", {}, table);
    var cells = {};
    function cell(row, key) {
      var c = el("td", { "data-key": key }, row);
      cells[key] = c;
      return c;
    }
    for (var r = 0; r < dim; r++) {
      var tr = el("tr", {}, body);
      el("th", { scope: "row" }, tr).textContent = String(r + 1);
      cell(tr, "in." + r); cell(tr, "ln.y." + r); cell(tr, "rms.y." + r);
    }
    var dl = el("dl", { "class": "nw-stats" }, out);
    function stat(key, label) {
      var pair = el("div", {}, dl);
      el("dt", {}, pair).innerHTML = label;
      var dd = el("dd", { "data-key": key }, pair);
      cells[key] = dd;
    }
    stat("ln.mean", "mean μ");
    stat("ln.var", "variance σ²");
    stat("rms.rms", "RMS");
    stat("ln.norm", "‖LayerNorm‖");
    stat("rms.norm", "‖RMSNorm‖");
    stat("ln.ysum", "sum of LayerNorm");
    stat("rms.ymean", "mean of RMSNorm");
    stat("sqrtd", "√d");
    var inv = el("p", { "class": "nw-inv", "aria-live": "polite" }, out);
    inv.innerHTML = 'Largest change of each output against the output for x itself (c = 1, s = 0): ' +
      'LayerNorm <strong data-key="ln.delta"></strong>, RMSNorm <strong data-key="rms.delta"></strong>.';
    cells["ln.delta"] = inv.querySelector('[data-key="ln.delta"]');
    cells["rms.delta"] = inv.querySelector('[data-key="rms.delta"]');
    var msg = el("p", { "class": "nw-msg", id: id + "msg", "aria-live": "polite" }, out);

    function message(text) { msg.textContent = text; }
    function show(key, v) {
      var c = cells[key];
      c.textContent = fmt(v);
      c.setAttribute("data-value", isFinite(v) ? String(v) : "NaN");
    }
    function input() { return state.x.map(function (v) { return state.c * v + state.s; }); }

    function placeArrow(line, v) {
      var p = P(v), len = Math.hypot(p[0], p[1]), lim = VIEW - 12;
      var clipped = len > lim;
      if (clipped) p = [p[0] * lim / len, p[1] * lim / len];
      line.setAttribute("x1", 0); line.setAttribute("y1", 0);
      line.setAttribute("x2", p[0].toFixed(2)); line.setAttribute("y2", p[1].toFixed(2));
      line.classList.toggle("nw-clipped", clipped);
      line.style.display = len < 1e-9 || !isFinite(len) ? "none" : "";
      return p;
    }

    function render(source) {
      var v = input();
      var ln = layerNorm(v, state.eps), rm = rmsNorm(v, state.eps);
      var ln0 = layerNorm(state.x, state.eps), rm0 = rmsNorm(state.x, state.eps);
      for (var i = 0; i < dim; i++) {
        show("in." + i, v[i]); show("ln.y." + i, ln.y[i]); show("rms.y." + i, rm.y[i]);
      }
      show("ln.mean", ln.mean); show("ln.var", ln.variance); show("rms.rms", rm.rms);
      show("ln.norm", ln.defined ? norm2(ln.y) : NaN); show("rms.norm", rm.defined ? norm2(rm.y) : NaN);
      show("ln.ysum", ln.defined ? ln.y.reduce(function (s, a) { return s + a; }, 0) : NaN);
      show("rms.ymean", rm.defined ? mean(rm.y) : NaN);
      show("sqrtd", Math.sqrt(dim));
      show("ln.delta", ln.defined && ln0.defined ? maxAbsDiff(ln.y, ln0.y) : NaN);
      show("rms.delta", rm.defined && rm0.defined ? maxAbsDiff(rm.y, rm0.y) : NaN);
      var notes = [];
      if (!ln.defined) notes.push("LayerNorm is undefined here: all components are equal, so the variance is 0, and eps = 0.");
      if (!rm.defined) notes.push("RMSNorm is undefined here: the input is the zero vector and eps = 0.");
      message(notes.join(" "));
      // picture
      var tip = placeArrow(arrowIn, v);
      placeArrow(arrowLn, ln.defined ? ln.y : v.map(function () { return 0; }));
      placeArrow(arrowRms, rm.defined ? rm.y : v.map(function () { return 0; }));
      var foot = P(v.map(function (a) { return a - ln.mean; }));
      footLine.setAttribute("x1", tip[0].toFixed(2)); footLine.setAttribute("y1", tip[1].toFixed(2));
      footLine.setAttribute("x2", foot[0].toFixed(2)); footLine.setAttribute("y2", foot[1].toFixed(2));
      footLine.style.display = arrowIn.classList.contains("nw-clipped") ? "none" : "";
      handle.setAttribute("cx", tip[0].toFixed(2)); handle.setAttribute("cy", tip[1].toFixed(2));
      handle.setAttribute("aria-valuetext", "input (" + v.map(fmt).join(", ") + ")");
      // controls (except the one being edited, so typing is not disturbed)
      Object.keys(inputs).forEach(function (key) {
        var val = key.charAt(0) === "x" ? state.x[+key.slice(1)] : state[key];
        var pair = inputs[key];
        if (pair.num !== source) pair.num.value = String(+val.toFixed(6));
        if (pair.range !== source) pair.range.value = String(val);
      });
    }

    function set(key, v, source) {
      if (key.charAt(0) === "x") state.x[+key.slice(1)] = v; else state[key] = v;
      render(source);
    }

    // move the input's tip by a screen displacement (in picture units), keeping c and s
    function nudge(dxScreen, dyScreen) {
      var v = input();
      var moved = v.map(function (a, i) { return a + (dxScreen * cam.right[i] - dyScreen * cam.up[i]) / UNIT; });
      if (state.c === 0) { message("With c = 0 the input is s·1 whatever x is; set c to move it."); return; }
      state.x = moved.map(function (a) { return (a - state.s) / state.c; });
      render(null);
    }

    var drag = null;
    function svgPoint(evt) {
      var m = svg.getScreenCTM();
      if (!m) return [0, 0];
      var pt = svg.createSVGPoint();
      pt.x = evt.clientX; pt.y = evt.clientY;
      var q = pt.matrixTransform(m.inverse());
      return [q.x, q.y];
    }
    handle.addEventListener("pointerdown", function (evt) {
      evt.preventDefault();
      handle.setPointerCapture(evt.pointerId);
      drag = { id: evt.pointerId, last: svgPoint(evt) };
      root.classList.add("nw-dragging");
    });
    handle.addEventListener("pointermove", function (evt) {
      if (!drag || evt.pointerId !== drag.id) return;
      var p = svgPoint(evt);
      nudge(p[0] - drag.last[0], p[1] - drag.last[1]);
      drag.last = p;
    });
    function endDrag(evt) {
      if (!drag || evt.pointerId !== drag.id) return;
      drag = null;
      root.classList.remove("nw-dragging");
    }
    handle.addEventListener("pointerup", endDrag);
    handle.addEventListener("pointercancel", endDrag);
    handle.addEventListener("keydown", function (evt) {
      var step = evt.shiftKey ? 0.5 * UNIT : 0.1 * UNIT;
      var d = { ArrowRight: [step, 0], ArrowLeft: [-step, 0], ArrowUp: [0, -step], ArrowDown: [0, step] }[evt.key];
      if (!d) return;
      evt.preventDefault();
      nudge(d[0], d[1]);
    });
    reset.addEventListener("click", function () {
      state = JSON.parse(JSON.stringify(defaults));
      Object.keys(inputs).forEach(function (k) { inputs[k].num.setAttribute("aria-invalid", "false"); });
      render(null);
    });
    render(null);
    root.setAttribute("data-ready", "true");
  }

  function initAll() {
    var roots = document.querySelectorAll(".norm-widget:not([data-ready])");
    for (var i = 0; i < roots.length; i++) build(roots[i]);
  }

  // exposed for the browser test and the console: the same functions the widget displays
  window.NormWidget = { layerNorm: layerNorm, rmsNorm: rmsNorm, init: initAll };

  // Material's instant navigation replaces the page without a reload: document$ emits on every page.
  if (typeof window.document$ !== "undefined" && window.document$ && typeof window.document$.subscribe === "function") {
    window.document$.subscribe(initAll);
  } else if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", initAll);
  } else {
    initAll();
  }
})();
