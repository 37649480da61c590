// Tables become cards on a phone (the CSS is in extra.css): each cell gets its column's name as data-label,
// taken from the table's header row (a cell spanning several columns counts for each), and the table is
// marked data-cards. Tables without a header row are left as they are.
(function () {
  function label(table) {
    var head = table.tHead && table.tHead.rows[table.tHead.rows.length - 1];
    if (!head || table.hasAttribute("data-cards")) return;
    var names = [];
    for (var i = 0; i < head.cells.length; i++) {
      var c = head.cells[i];
      for (var k = 0; k < (c.colSpan || 1); k++) names.push(c.textContent.trim());
    }
    for (var b = 0; b < table.tBodies.length; b++) {
      var rows = table.tBodies[b].rows;
      for (var r = 0; r < rows.length; r++) {
        var col = 0;
        for (var j = 0; j < rows[r].cells.length; j++) {
          var cell = rows[r].cells[j];
          cell.setAttribute("data-label", names[col] || "");
          col += cell.colSpan || 1;
        }
      }
    }
    table.setAttribute("data-cards", "");
  }
  function all() {
    var tables = document.querySelectorAll("article table");
    for (var t = 0; t < tables.length; t++) if (!tables[t].closest(".norm-widget")) label(tables[t]);  // the widget lays out its own table
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", all);
  else all();
})();
