// Click a header to sort by it (again to reverse); cells sort by data-v, numbers as numbers, blanks last.
document.querySelectorAll("table.sortable th").forEach((th, col) => th.addEventListener("click", () => {
  const body = th.closest("table").tBodies[0];
  const dir = th.getAttribute("aria-sort") === "ascending" ? -1 : 1;
  th.parentNode.querySelectorAll("th").forEach((h) => h.removeAttribute("aria-sort"));
  th.setAttribute("aria-sort", dir > 0 ? "ascending" : "descending");
  const key = (row) => row.cells[col].dataset.v;
  body.append(...[...body.rows].sort((a, b) => {
    const x = key(a), y = key(b);
    if (x === "" || y === "") return (x === "") - (y === "");
    const nx = Number(x), ny = Number(y);
    return dir * (isNaN(nx) || isNaN(ny) ? x.localeCompare(y) : nx - ny);
  }));
}));

// Chart tooltips: matplotlib names the group of each artist with one (its gid) but writes no <title>.
document.querySelectorAll(".chart").forEach((chart) => {
  for (const [id, text] of Object.entries(JSON.parse(chart.dataset.tips))) {
    const title = document.createElementNS("http://www.w3.org/2000/svg", "title");
    title.textContent = text;
    document.getElementById(id).prepend(title);
  }
});
