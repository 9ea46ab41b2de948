"""Exception and warning types users can catch: unsupported features, plugin failures, device errors, deprecated plugins."""

class TinycoreError(Exception):
  """Base of every error tinycore raises on purpose."""

class UnsupportedError(TinycoreError, NotImplementedError):
  """A backend does not support a dtype, op or size; the message names the backend and the feature."""

class PluginError(TinycoreError, RuntimeError):
  """A backend plugin failed to import, register or open."""

class CompileError(TinycoreError, RuntimeError):
  """A backend failed to render, assemble or load a kernel."""

class DeviceError(TinycoreError, RuntimeError):
  """A backend failed at run time (launch, copy, allocation)."""

class ContractDeprecationWarning(FutureWarning):
  """A plugin was written for an older plugin-contract version (or states its version by importing the core's): it runs,
  adapted, and the message says what its package should change. A FutureWarning, so users see it by default."""
