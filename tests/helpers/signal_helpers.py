"""For tests that interrupt a child process with SIGINT."""

from __future__ import annotations

import signal


def default_sigint() -> None:
    """``preexec_fn`` for a child that must see Ctrl-C: restore SIGINT's default disposition. A
    test run launched in the background by a non-interactive shell (``cmd &``, e.g. a CI script)
    inherits SIGINT *ignored*; Python then installs no KeyboardInterrupt handler in the child and
    the interrupt would never arrive."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
