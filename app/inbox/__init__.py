"""The in-app inbox, as the application serves it.

- ``tokens``: the recipient tokens a browser holds (signed, stateless, revocable);
- ``provider``: the IN_APP provider, which leaves a message in the recipient's inbox;
- ``read_steps``: a read brings its notification's steps that wait on one forward;
- ``api``: its HTTP routes, the realtime stream and the demo page.

Its store is ``streams.inbox``; its read model, ``projections.inbox_rows``.
"""
