"""HTML views of runs, traces and diffs: self-contained report pages and compact notebook views.

Modules, bottom to top (each imports only those above it):

- ``locate``: each candidate batch indexed once by original query (counts, positions, a row's place);
- ``extract``: what a trace page shows, as compact data (stages, per query: counts, the top candidates,
  score histograms, the final hits' ranks at every stage and their paths, the records named once);
- ``dag``: a recipe's or a trace's DAG laid out in Python and drawn as SVG;
- ``charts``: histograms, the bump chart of the final hits across stages, sorted bar charts;
- ``assets``: the pages' style sheet and script (constants: the script reads the data and adds
  interaction, the tables are HTML);
- ``render``: the per-query pieces as HTML (what the script draws again for another query);
- ``tracepage``, ``diffpage``: whole pages (:meth:`Trace.to_html`, :meth:`Result.to_html`, the diff of
  two traces);
- ``reprs``: the notebook views (``_repr_html_``) of results, traces, recipes and diffs;
  ``batchview``: a candidate batch's (apart: :mod:`irflow.engine.batches` imports it).

Every value goes through :mod:`irflow.util.html` (escaped for where it lands); pages carry a
Content-Security-Policy that lets nothing load and only their own script run.
"""
