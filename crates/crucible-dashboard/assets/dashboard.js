// The one script of the dashboard: on the home page, swap in the live sections that the
// server sends as one JSON object per event ({section id: HTML rendered by the server}).
"use strict";
(function () {
  const url = document.body.dataset.live;
  if (!url) return;
  const source = new EventSource(url);
  source.addEventListener("home", (event) => {
    const sections = JSON.parse(event.data);
    for (const [id, html] of Object.entries(sections)) {
      const element = document.getElementById(id);
      if (element) element.innerHTML = html;
    }
    document.body.dataset.updated = String(Date.now());
  });
  source.addEventListener("unavailable", () => {
    document.body.dataset.stale = "true";
  });
})();
