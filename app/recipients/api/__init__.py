"""The recipients' HTTP edge, mounted by ``app.api``.

- ``settings``: a recipient's preferences and quiet hours;
- ``profiles``: a recipient's profile and push targets, and erasing a recipient;
- ``suppressions``: the suppression list: looking an address up, adding, removing;
- ``deliveries``: a recipient's message log, every producer's deliveries to it.
"""
