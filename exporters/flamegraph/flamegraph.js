"use strict";
// Interactivity for sprof flame graphs: zoom, search, details. The
// geometry object (written before this script) says where frames are.
(function () {
	var frames = [];
	var zoomed = null;
	var searchTerm = "";
	var byId = function (id) { return document.getElementById(id); };
	var details = byId("details"), matched = byId("matched");
	var resetButton = byId("reset"), searchButton = byId("search");

	// depthOf inverts the layout: frame rows are geometry.frameHeight apart.
	function depthOf(y) {
		var row = Math.round((y - geometry.top) / geometry.frameHeight);
		return geometry.icicle ? row : geometry.maxDepth - row;
	}

	// fit cuts a name to the width, as the server-side layout does.
	function fit(name, width) {
		var n = Math.floor((width - 6) / (geometry.fontSize * geometry.charWidth));
		if (n < 3) return "";
		var chars = Array.from(name);
		return chars.length <= n ? name : chars.slice(0, n - 2).join("") + "..";
	}

	function place(f, x, width) {
		f.rect.setAttribute("x", x.toFixed(2));
		f.rect.setAttribute("width", width.toFixed(2));
		f.text.setAttribute("x", (x + 3).toFixed(2));
		f.text.textContent = fit(f.name, width);
	}

	function zoom(target) {
		var x0 = target.x, x1 = target.x + target.w, eps = 1e-6;
		var scale = geometry.width / target.w;
		frames.forEach(function (f) {
			var inside = f.depth >= target.depth && f.x >= x0 - eps && f.x + f.w <= x1 + eps;
			var ancestor = f.depth < target.depth && f.x <= x0 + eps && f.x + f.w >= x1 - eps;
			f.g.classList.toggle("hidden", !inside && !ancestor);
			f.g.classList.toggle("parent", ancestor);
			if (inside) place(f, geometry.left + (f.x - x0) * scale, f.w * scale);
			if (ancestor) place(f, geometry.left, geometry.width);
		});
		zoomed = target;
		resetButton.classList.remove("hidden");
	}

	function resetZoom() {
		frames.forEach(function (f) {
			f.g.classList.remove("hidden", "parent");
			place(f, f.x, f.w);
		});
		zoomed = null;
		resetButton.classList.add("hidden");
	}

	// search highlights frames whose names match term (a regular
	// expression, or literal text if it does not parse) and reports the
	// share of all samples under them, counting nested matches once.
	function search(term) {
		searchTerm = term || "";
		var re = null;
		if (searchTerm !== "") {
			try {
				re = new RegExp(searchTerm);
			} catch (e) {
				re = new RegExp(searchTerm.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"));
			}
		}
		var spans = [];
		frames.forEach(function (f) {
			var hit = re !== null && re.test(f.name);
			f.rect.setAttribute("fill", hit ? geometry.highlight : f.fill);
			if (hit) spans.push([f.x, f.x + f.w]);
		});
		if (re === null) {
			matched.textContent = " ";
			searchButton.textContent = "Search";
			return;
		}
		spans.sort(function (a, b) { return a[0] - b[0]; });
		var covered = 0, end = -Infinity;
		spans.forEach(function (s) {
			if (s[0] >= end) {
				covered += s[1] - s[0];
				end = s[1];
			} else if (s[1] > end) {
				covered += s[1] - end;
				end = s[1];
			}
		});
		matched.textContent = "Matched: " + (100 * covered / geometry.width).toFixed(1) + "%";
		searchButton.textContent = "Reset Search";
	}

	function askSearch() {
		if (searchTerm !== "") {
			search("");
			return;
		}
		var term = window.prompt("Search for (regular expression):", "");
		if (term !== null) search(term);
	}

	Array.prototype.forEach.call(document.querySelectorAll("g.f"), function (g) {
		var rect = g.querySelector("rect"), title = g.querySelector("title").textContent;
		var f = {
			g: g, rect: rect, text: g.querySelector("text"), title: title,
			name: title.slice(0, title.lastIndexOf(" (")),
			x: parseFloat(rect.getAttribute("x")), w: parseFloat(rect.getAttribute("width")),
			depth: depthOf(parseFloat(rect.getAttribute("y"))), fill: rect.getAttribute("fill")
		};
		frames.push(f);
		g.addEventListener("click", function () { zoom(f); });
		g.addEventListener("mouseover", function () { details.textContent = f.title; });
		g.addEventListener("mouseout", function () { details.textContent = " "; });
	});
	resetButton.addEventListener("click", resetZoom);
	searchButton.addEventListener("click", askSearch);
	window.addEventListener("keydown", function (e) {
		if ((e.ctrlKey || e.metaKey) && e.key === "f") {
			e.preventDefault();
			askSearch();
		} else if (e.key === "Escape") {
			if (zoomed !== null) resetZoom();
			search("");
		}
	});
	var params = new URLSearchParams(window.location.search);
	if (params.has("z")) {
		// ?z=name zooms into the widest frame of that name, for links.
		var widest = null;
		frames.forEach(function (f) {
			if (f.name === params.get("z") && (widest === null || f.w > widest.w)) widest = f;
		});
		if (widest !== null) zoom(widest);
	}
	if (params.has("s")) search(params.get("s"));
})();
