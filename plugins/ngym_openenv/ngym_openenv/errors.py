"""The plugin's errors (``NgymError`` subclasses: the CLI shows their message as one line)."""

from ngym import NgymError


class OpenEnvInstallError(NgymError):
    """The OpenEnv environment could not be installed (the message says why and what to do)."""

    exit_code = 2
