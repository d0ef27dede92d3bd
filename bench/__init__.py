"""Clarion's benchmarks (run as scripts; see each script's docstring,
``docs/developing/benchmarks.md`` and ``docs/performance.md``; earlier runs: ``HISTORY.md``).

- ``harness.py``: everything two or more benchmarks use; the only module they share.
- ``ingest.py`` (with ``bare_app.py`` and ``wrk_post.lua``), ``pipeline.py``,
  ``projector.py``, ``memory.py``, ``instructions.py``, ``unsubscribe.py``: one benchmark
  each.
- ``peers.py``: Clarion beside the best of several configurations of Celery and of arq
  (``peer_configs.py``), with its job (``peer_job.py``), the peers' workers and enqueuers
  (``peer_celery.py``, ``peer_arq.py`` with ``arq-requirements.txt``) and its test
  (``test_peers.py``, run by ``make bench-check``).
- ``report.py`` (with ``report_summary.py``): all of them in one run, one report.
- ``results/``: the latest result of each benchmark and the latest report.
"""
