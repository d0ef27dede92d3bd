"""Provider feedback: what providers report after they took a message (delivered, bounced,
complained, unsubscribed, a dead token) and what it changes.

Owns each provider's callback scheme (``callbacks``: signature, staleness, the items a
callback holds) and the processor that matches each item to its delivery and applies it
(``processor``), and the route providers call (``api``).

May import: the shared ``app`` modules, ``app.recipients`` (how the suppression list shows
an address), ``projections`` (matching by message id), ``streams``. Only ``api`` knows HTTP (and may
import ``app.api``).
"""
