// MathJax 3 configuration for pymdownx.arithmatex (generic mode). Self-hosted: no network access.
window.MathJax = {
  tex: { inlineMath: [["\\(", "\\)"]], displayMath: [["\\[", "\\]"]], processEscapes: true, processEnvironments: true },
  options: { ignoreHtmlClass: ".*|", processHtmlClass: "arithmatex", enableMenu: false },
  svg: { fontCache: "global" },
  startup: { typeset: true },
};
// Material's instant navigation swaps page content without a reload: typeset again each time.
if (typeof document$ !== "undefined") {
  document$.subscribe(() => {
    if (window.MathJax && MathJax.typesetPromise) {
      if (MathJax.startup.output.clearFontCache) MathJax.startup.output.clearFontCache();
      MathJax.typesetClear();
      MathJax.texReset();
      MathJax.typesetPromise();
    }
  });
}
