(function () {
  "use strict";
  function each(list, fn) { Array.prototype.forEach.call(list, fn); }

  function setUp(section) {
    var controls = section.querySelector(".controls");
    if (!controls) { return; }
    controls.hidden = false;
    var boxes = controls.querySelectorAll("input[type=checkbox][data-status]");
    var search = controls.querySelector("input[type=search]");
    var shown = controls.querySelector(".shown");
    var detail = section.querySelector(".detail-box");
    var rows = section.querySelectorAll(".heatmap tr.row");

    function apply() {
      var on = {};
      each(boxes, function (b) { on[b.getAttribute("data-status")] = b.checked; });
      var query = search.value.trim().toLowerCase();
      var visible = 0;
      each(rows, function (tr) {
        var any = false;
        each(tr.querySelectorAll("td.cell"), function (td) {
          var keep = on[td.getAttribute("data-status")] !== false;
          td.classList.toggle("off", !keep);
          if (keep) { any = true; }
        });
        var match = !query || tr.getAttribute("data-source").toLowerCase().indexOf(query) >= 0;
        tr.hidden = !(any && match);
        if (!tr.hidden) { visible += 1; }
      });
      each(section.querySelectorAll(".heatmap details.group"), function (group) {
        var left = group.querySelectorAll("tr.row:not([hidden])").length;
        group.hidden = left === 0;
        if (query && left > 0) { group.open = true; }
      });
      shown.textContent = visible + " of " + rows.length + " sources shown";
    }

    function show(td) {
      each(section.querySelectorAll(".cell.selected"), function (c) { c.classList.remove("selected"); });
      td.classList.add("selected");
      detail.textContent = td.getAttribute("title");
      var path = td.getAttribute("data-path");
      if (path) {
        var link = document.createElement("a");
        link.href = "#" + path;
        link.textContent = " Show the path \u2192";
        detail.appendChild(link);
      }
    }

    each(boxes, function (b) { b.addEventListener("change", apply); });
    search.addEventListener("input", apply);
    each(section.querySelectorAll(".heatmap td.cell"), function (td) {
      td.addEventListener("click", function (event) {
        event.preventDefault();
        show(td);
      });
    });
    apply();
  }

  each(document.querySelectorAll("section.model"), setUp);
})();
