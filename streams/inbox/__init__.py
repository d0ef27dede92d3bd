"""Recipients' inboxes in Redis: the messages IN_APP deliveries leave and what recipients
do with them.

- ``store``: reading and changing inboxes (``page.lua``, ``mark.lua``);
- ``marks``: what reading, seeing or archiving a message changes, and its ``mark.lua`` call;
- ``messages``: a message and its state as Redis keeps them; ``pages``: one page per shard;
- ``live``, ``changes``: the feed of changes a realtime client follows, and its cursor;
- ``admission``: how many realtime streams an API process holds, and for whom;
- ``revocation``: revoking a recipient's tokens (``revoke.lua``).
"""
