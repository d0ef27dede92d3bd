"""What an SMTP relay's answers mean, classified on their own: the cases a real relay
(tests/integration/providers/test_smtp.py) cannot show deterministically."""

from __future__ import annotations

from app.providers.base import Reason
from app.providers.smtp_answers import WAITING, failure_error, reply_error
from streams.core.vocabulary import ErrorClass

BOB = "bob@example.com"


def test_enhanced_codes_about_the_sender_do_not_blame_the_recipient() -> None:
    error = reply_error("mail", "end of data", 553, "5.1.8 Bad sender's system address", "")
    assert error.reason is Reason.REJECTED
    error = reply_error("mail", "MAIL", 550, "5.1.1 sender unknown", "")
    assert error.reason is Reason.REJECTED
    error = reply_error("mail", "RCPT", 550, "5.1.8 sender domain has no MX", "")
    assert error.reason is Reason.REJECTED
    # An enhanced code of another class than the reply's is not one (RFC 3463 section 2).
    error = reply_error("mail", "end of data", 554, "4.1.1 odd", "")
    assert error.reason is Reason.REJECTED


def test_a_send_that_timed_out_waiting_for_a_connection_was_not_accepted() -> None:
    # Through the pool the deadlines of the holder and the waiter fall together, and which
    # fires first is up to the scheduler: the classification is checked on its own.
    error = failure_error("mail", WAITING, TimeoutError(), BOB)
    assert (error.error_class, error.not_accepted) == (ErrorClass.TRANSIENT, True)
    assert error.message == "mail: waiting for a connection: timed out"
