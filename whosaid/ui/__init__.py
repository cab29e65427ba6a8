"""The web page (`GET /ui`) and the offline HTML transcript: plain files (page.html, app.js,
viewer.js, viewer.css) and the Python that serves and fills them (view)."""
