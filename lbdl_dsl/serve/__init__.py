"""The studio (``lbdl serve``): a spec's text, figure, costs and errors live in the browser.

`folder` guards the files, `views` computes what the page shows (pure functions over the
compiler and the backends), `worker` runs them with a time limit, `app` serves them; the page
itself is ``static/`` (the editor bundled from ``web/`` by ``make studio``).
"""
