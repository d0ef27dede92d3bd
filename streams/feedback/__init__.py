"""Provider feedback in Redis.

- ``store``: the inbox of verified callbacks (``take.lua``, which refuses a replayed one) and
  applying a callback's feedback to its delivery (``apply.lua``).
"""
