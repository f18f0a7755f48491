"""The operator tools' one exception root: every error they raise on purpose derives from it (the Google
API client's GcpError and its kinds, billing's BillingError), so a command line catches this one class."""


class OpsError(Exception):
    """What an operator tool could not do as asked; the message says what and why."""
