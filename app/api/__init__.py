"""The HTTP API's edge: the Litestar app, and what every route shares.

- ``app``: the application factory, which mounts every route, its own and the features'
  (``app.ingest.api``, ``app.campaigns.api``, ``app.inbox.api``, ``app.recipients.api``,
  ``app.feedback.api``, ``app.status_webhooks.api``, ``app.operations.api``);
- ``auth`` (API keys and scopes), ``body`` (bounded bodies), ``params``, ``cursor``,
  ``methods``, ``schemas``, ``read_model``: what handlers share;
- ``errors``: the one table from the domain's errors to status codes;
- ``cross_site``, ``request_spans``, ``http_metrics``: middleware;
- ``docs``: the OpenAPI documentation;
- ``notification_status``: the status API (a notification and its deliveries);
- ``dashboard``, ``dashboard_charts``, ``dashboard_signals``, ``charts``: the FAILED dashboard;
  ``dashboard_recipients``: its recipient search (a recipient's message log);
- ``unsubscribe``: the one-click unsubscribe page;
- ``html_pages``: the HTML both render (``templates``), its headers and error page.

Owns everything HTTP: status codes (the domain's errors get theirs in ``errors``), headers,
OpenAPI documentation, HTML. Handlers are thin: they check the caller and the input, then
call the features, ``projections`` or ``streams``.

May import: every ``app`` package except ``cli``, ``processes``, ``delivery`` and
``providers``; ``projections``; ``streams``.
"""
